//! Emulator fidelity: probe an SQS endpoint against AWS's documented semantics.
//!
//! `crashpoint doctor --calibrate` runs [`calibrate`]: seven small probes, each on queues of its
//! own (`crashpoint-calibrate-<run>-<probe>`), all at once, in about 2 s of wall time. Each probe
//! does what a consumer does (send, receive, ChangeMessageVisibility, DeleteMessage, redrive),
//! compares what the endpoint did with what the AWS documentation says ([`Behaviour::aws`],
//! quoted from [`Behaviour::source`]) and yields a [`Verdict`]. A mismatch is information, not
//! an error: it tells which failure windows the emulator can or cannot reproduce. GUIDE.md §5
//! records what LocalStack 4.13.1 does; this module measures it on whatever endpoint is given.
//!
//! Every queue a run creates is deleted afterwards, also when a probe fails or times out.

mod probes;

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use aws_sdk_sqs::error::DisplayErrorContext;

use probes::{
    fifo_dedup_after_delete, long_poll_early, receive_count, redrive_to_dlq, stale_receipt_handle, visibility_extend,
    visibility_zero, Cx,
};

/// The prefix of every queue a calibration creates; a run appends `<8 hex digits>-<probe>`.
pub const QUEUE_PREFIX: &str = "crashpoint-calibrate";

/// The longest a single probe may take before it is reported as failed, in seconds.
pub const PROBE_TIMEOUT_S: u64 = 15;

/// The longest the reachability check (one ListQueues) may take, in seconds.
pub const REACH_TIMEOUT_S: u64 = 5;

/// One documented SQS behaviour that a probe checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Behaviour {
    /// DeleteMessage with a receipt handle older than the latest receive.
    StaleReceiptHandle,
    /// ChangeMessageVisibility extends the timeout of an in-flight message.
    VisibilityExtend,
    /// ChangeMessageVisibility 0 makes an in-flight message receivable at once.
    VisibilityZero,
    /// `ApproximateReceiveCount` counts receives: 1, then 2 on redelivery.
    ReceiveCount,
    /// FIFO: a resend with the same MessageDeduplicationId after the delete is dropped.
    FifoDedupAfterDelete,
    /// A RedrivePolicy moves a message to the dead-letter queue after `maxReceiveCount` receives.
    RedriveToDlq,
    /// A long poll returns as soon as a message arrives, not at the end of its wait.
    LongPollEarly,
}

impl Behaviour {
    /// Every behaviour, in table order.
    pub const ALL: [Behaviour; 7] = [
        Behaviour::StaleReceiptHandle,
        Behaviour::VisibilityExtend,
        Behaviour::VisibilityZero,
        Behaviour::ReceiveCount,
        Behaviour::FifoDedupAfterDelete,
        Behaviour::RedriveToDlq,
        Behaviour::LongPollEarly,
    ];

    /// The kebab-case name used in the table, in JSON and in queue names,
    /// e.g. `stale-receipt-handle`.
    pub fn as_str(self) -> &'static str {
        match self {
            Behaviour::StaleReceiptHandle => "stale-receipt-handle",
            Behaviour::VisibilityExtend => "visibility-extend",
            Behaviour::VisibilityZero => "visibility-zero",
            Behaviour::ReceiveCount => "receive-count",
            Behaviour::FifoDedupAfterDelete => "fifo-dedup-after-delete",
            Behaviour::RedriveToDlq => "redrive-to-dlq",
            Behaviour::LongPollEarly => "long-poll-early",
        }
    }

    /// What the AWS documentation says, in one line (paraphrased closely from [`Self::source`]).
    pub fn aws(self) -> &'static str {
        match self {
            Behaviour::StaleReceiptHandle => {
                "DeleteMessage with an older receipt handle succeeds, but the message might not be deleted"
            }
            Behaviour::VisibilityExtend => {
                "ChangeMessageVisibility sets a new timeout counted from the call: an extended message stays hidden"
            }
            Behaviour::VisibilityZero => {
                "ChangeMessageVisibility 0 ends the visibility timeout: the message is receivable at once"
            }
            Behaviour::ReceiveCount => {
                "ApproximateReceiveCount is the number of times a message was received but not deleted"
            }
            Behaviour::FifoDedupAfterDelete => {
                "a send with a used MessageDeduplicationId is accepted but not delivered for 5 minutes"
            }
            Behaviour::RedriveToDlq => {
                "when ReceiveCount exceeds maxReceiveCount the message is moved to the dead-letter queue"
            }
            Behaviour::LongPollEarly => {
                "long polling (WaitTimeSeconds > 0) returns messages as soon as they become available"
            }
        }
    }

    /// The AWS documentation page [`Self::aws`] comes from (SQS API reference or developer guide).
    pub fn source(self) -> &'static str {
        match self {
            Behaviour::StaleReceiptHandle => {
                "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html"
            }
            Behaviour::VisibilityExtend => {
                "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html"
            }
            Behaviour::VisibilityZero => {
                "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html"
            }
            Behaviour::ReceiveCount => {
                "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html"
            }
            Behaviour::FifoDedupAfterDelete => {
                "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-queues-exactly-once-processing.html"
            }
            Behaviour::RedriveToDlq => {
                "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html"
            }
            Behaviour::LongPollEarly => {
                "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-short-and-long-polling.html"
            }
        }
    }
}

impl std::fmt::Display for Behaviour {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the endpoint's behaviour compares with the documentation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "verdict", content = "reason")]
pub enum Verdict {
    /// The endpoint did what AWS documents.
    Matches,
    /// The endpoint did something AWS does not document (or rules out).
    Differs,
    /// The probe could not complete (an SQS error, or it exceeded [`PROBE_TIMEOUT_S`]); the
    /// reason says which call failed. No conclusion about the behaviour.
    ProbeFailed(String),
}

/// The outcome of one probe.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Probe {
    /// The behaviour probed.
    pub behaviour: Behaviour,
    /// What the endpoint did, in one line (`probe failed: <reason>` when the probe failed).
    pub observed: String,
    /// The comparison with [`Behaviour::aws`].
    pub verdict: Verdict,
}

/// The result of [`calibrate`]: one [`Probe`] per [`Behaviour`], in [`Behaviour::ALL`] order.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Calibration {
    /// The SQS endpoint probed, for display (already redacted by the caller if needed).
    pub endpoint: String,
    /// One entry per behaviour.
    pub probes: Vec<Probe>,
    /// Wall time of the whole calibration, queue creation and cleanup included, in milliseconds.
    pub wall_ms: u64,
}

impl Calibration {
    /// The verdict on `b`, or `None` when `b` was not probed.
    pub fn verdict(&self, b: Behaviour) -> Option<&Verdict> {
        self.probes.iter().find(|p| p.behaviour == b).map(|p| &p.verdict)
    }

    /// true when the probe of `b` differs from AWS or failed (false when it matches, and when
    /// `b` was not probed at all: there is no evidence of a deviation then).
    pub fn deviates(&self, b: Behaviour) -> bool {
        matches!(self.verdict(b), Some(Verdict::Differs | Verdict::ProbeFailed(_)))
    }

    /// The probes that could not complete.
    #[cfg(any(test, feature = "internals"))]
    pub fn failed(&self) -> Vec<&Probe> {
        self.probes.iter().filter(|p| matches!(p.verdict, Verdict::ProbeFailed(_))).collect()
    }

    /// The printable table (fixed-width text, one row per probe, then a line naming the
    /// mismatches and failures plainly).
    ///
    /// Columns: behaviour, match (`yes`, `DIFFERS`, `FAILED`), what this endpoint did, what AWS
    /// documents with a `[n]` reference; the references' URLs follow the rows.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        const H_BEHAVIOUR: &str = "behaviour";
        const H_MATCH: &str = "match";
        const H_OBSERVED: &str = "this endpoint";
        const H_AWS: &str = "AWS documents";
        let mark = |v: &Verdict| match v {
            Verdict::Matches => "yes",
            Verdict::Differs => "DIFFERS",
            Verdict::ProbeFailed(_) => "FAILED",
        };
        let w_b = self.probes.iter().map(|p| p.behaviour.as_str().len()).chain([H_BEHAVIOUR.len()]).max().unwrap_or(0);
        let w_m = ["yes", "DIFFERS", "FAILED", H_MATCH].iter().map(|s| s.len()).max().unwrap_or(0);
        let w_o = self.probes.iter().map(|p| p.observed.chars().count()).chain([H_OBSERVED.len()]).max().unwrap_or(0);
        let mut out = String::new();
        let _ = writeln!(out, "SQS calibration against {} ({} ms):", self.endpoint, self.wall_ms);
        let _ = writeln!(out, "  {H_BEHAVIOUR:<w_b$}  {H_MATCH:<w_m$}  {H_OBSERVED:<w_o$}  {H_AWS}");
        for (i, p) in self.probes.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {:<w_b$}  {:<w_m$}  {:<w_o$}  {} [{}]",
                p.behaviour.as_str(),
                mark(&p.verdict),
                p.observed,
                p.behaviour.aws(),
                i + 1
            );
        }
        for (i, p) in self.probes.iter().enumerate() {
            let _ = writeln!(out, "  [{}] {}", i + 1, p.behaviour.source());
        }
        let names = |f: &dyn Fn(&Verdict) -> bool| {
            self.probes.iter().filter(|p| f(&p.verdict)).map(|p| p.behaviour.as_str()).collect::<Vec<_>>()
        };
        let differs = names(&|v| *v == Verdict::Differs);
        let failed = names(&|v| matches!(v, Verdict::ProbeFailed(_)));
        let list = |v: &[&str]| if v.is_empty() { "none".to_string() } else { v.join(", ") };
        if differs.is_empty() && failed.is_empty() {
            let _ = writeln!(out, "every probed behaviour matches the AWS documentation");
        } else {
            let _ = writeln!(
                out,
                "differs from AWS: {}; probes failed: {}",
                list(&differs),
                list(&failed)
            );
        }
        out
    }
}

/// Runs every probe concurrently against `sqs` (endpoint url given for display).
///
/// Each probe creates its own queues named `crashpoint-calibrate-<8 hex>-<probe>` (FIFO ones
/// end in `.fifo`); every queue created is deleted before this returns, whatever the probes did.
/// A probe that errors, or takes longer than [`PROBE_TIMEOUT_S`], becomes a
/// [`Verdict::ProbeFailed`] row. Takes about 2 s when the endpoint behaves like AWS (the
/// longest probes wait out a 1 s visibility timeout or a 1 s long poll on an empty queue).
///
/// Errors only when the endpoint is unreachable (one ListQueues fails or takes longer than
/// [`REACH_TIMEOUT_S`]).
pub async fn calibrate(sqs: &aws_sdk_sqs::Client, endpoint: &str) -> Result<Calibration> {
    let started = Instant::now();
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let prefix = format!("{QUEUE_PREFIX}-{run}");
    match tokio::time::timeout(
        Duration::from_secs(REACH_TIMEOUT_S),
        sqs.list_queues().queue_name_prefix(&prefix).send(),
    )
    .await
    {
        Err(_) => bail!("SQS endpoint {endpoint} did not answer ListQueues within {REACH_TIMEOUT_S} s"),
        Ok(Err(e)) => bail!("SQS endpoint {endpoint} is unreachable: {}", DisplayErrorContext(&e)),
        Ok(Ok(_)) => {}
    }
    let cx = Cx::new(sqs, prefix);
    let (a, b, c, d, e, f, g) = tokio::join!(
        run_probe(Behaviour::StaleReceiptHandle, stale_receipt_handle(&cx)),
        run_probe(Behaviour::VisibilityExtend, visibility_extend(&cx)),
        run_probe(Behaviour::VisibilityZero, visibility_zero(&cx)),
        run_probe(Behaviour::ReceiveCount, receive_count(&cx)),
        run_probe(Behaviour::FifoDedupAfterDelete, fifo_dedup_after_delete(&cx)),
        run_probe(Behaviour::RedriveToDlq, redrive_to_dlq(&cx)),
        run_probe(Behaviour::LongPollEarly, long_poll_early(&cx)),
    );
    cx.cleanup().await;
    Ok(Calibration {
        endpoint: endpoint.to_string(),
        probes: vec![a, b, c, d, e, f, g],
        wall_ms: started.elapsed().as_millis() as u64,
    })
}

/// What a probe found: the observed line, and whether it matches the documentation.
pub(crate) type Finding = (String, bool);

async fn run_probe(behaviour: Behaviour, probe: impl std::future::Future<Output = Result<Finding>>) -> Probe {
    let (observed, verdict) = match tokio::time::timeout(Duration::from_secs(PROBE_TIMEOUT_S), probe).await {
        Ok(Ok((observed, true))) => (observed, Verdict::Matches),
        Ok(Ok((observed, false))) => (observed, Verdict::Differs),
        Ok(Err(e)) => {
            let reason = format!("{e:#}");
            (format!("probe failed: {reason}"), Verdict::ProbeFailed(reason))
        }
        Err(_) => {
            let reason = format!("no result within {PROBE_TIMEOUT_S} s");
            (format!("probe failed: {reason}"), Verdict::ProbeFailed(reason))
        }
    };
    Probe { behaviour, observed, verdict }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cal() -> Calibration {
        let mut probes: Vec<Probe> = Behaviour::ALL
            .iter()
            .map(|&b| Probe { behaviour: b, observed: "did what AWS documents".into(), verdict: Verdict::Matches })
            .collect();
        probes[0].verdict = Verdict::Differs;
        probes[0].observed = "DeleteMessage with the older handle: OK; message deleted".into();
        probes[5].verdict = Verdict::ProbeFailed("CreateQueue: boom".into());
        probes[5].observed = "probe failed: CreateQueue: boom".into();
        Calibration { endpoint: "http://127.0.0.1:4566".into(), probes, wall_ms: 1234 }
    }

    #[test]
    fn names_are_unique_kebab_and_fit_queue_names() {
        let mut seen = std::collections::BTreeSet::new();
        for b in Behaviour::ALL {
            assert!(seen.insert(b.as_str()), "duplicate {b}");
            assert!(b.as_str().chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{b}");
            assert_eq!(serde_json::to_value(b).unwrap(), serde_json::json!(b.as_str()));
            assert!(b.source().starts_with("https://docs.aws.amazon.com/AWSSimpleQueueService/"), "{b}");
            assert!(!b.aws().is_empty());
            // Longest name: prefix, 8 hex digits, probe, and a `-dlq` or `.fifo` suffix (SQS: ≤ 80).
            assert!(format!("{QUEUE_PREFIX}-12345678-{b}.fifo").len() <= 80, "{b}");
        }
    }

    #[test]
    fn deviates_on_differs_and_failed_only() {
        let c = cal();
        assert!(c.deviates(Behaviour::StaleReceiptHandle));
        assert!(c.deviates(Behaviour::RedriveToDlq));
        assert!(!c.deviates(Behaviour::VisibilityZero));
        assert!(!Calibration::default().deviates(Behaviour::VisibilityZero));
        assert_eq!(c.verdict(Behaviour::VisibilityZero), Some(&Verdict::Matches));
        assert_eq!(Calibration::default().verdict(Behaviour::VisibilityZero), None);
        let failed: Vec<_> = c.failed().iter().map(|p| p.behaviour).collect();
        assert_eq!(failed, vec![Behaviour::RedriveToDlq]);
    }

    #[test]
    fn table_has_a_row_per_probe_sources_and_a_plain_summary() {
        let t = cal().table();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("http://127.0.0.1:4566") && lines[0].contains("1234 ms"), "{t}");
        for (i, b) in Behaviour::ALL.iter().enumerate() {
            let row = lines[2 + i];
            assert!(row.trim_start().starts_with(b.as_str()), "{t}");
            assert!(row.contains(b.aws()), "{t}");
            assert!(t.contains(&format!("[{}] {}", i + 1, b.source())), "{t}");
        }
        assert!(lines[2].contains("DIFFERS") && lines[7].contains("FAILED") && lines[3].contains("yes"), "{t}");
        // The columns line up: every row's observed text starts at the same offset.
        let col = lines[1].find("this endpoint").unwrap();
        assert_eq!(lines[2].find("DeleteMessage with").unwrap(), col, "{t}");
        assert_eq!(lines[3].find("did what").unwrap(), col, "{t}");
        assert_eq!(
            lines.last().unwrap(),
            &"differs from AWS: stale-receipt-handle; probes failed: redrive-to-dlq",
            "{t}"
        );
        let mut all_ok = cal();
        for p in &mut all_ok.probes {
            p.verdict = Verdict::Matches;
        }
        assert!(all_ok.table().ends_with("every probed behaviour matches the AWS documentation\n"));
    }

    #[test]
    fn serialises_with_kebab_names_and_tagged_verdicts() {
        let v = serde_json::to_value(cal()).unwrap();
        assert_eq!(v["probes"][0]["behaviour"], "stale-receipt-handle");
        assert_eq!(v["probes"][0]["verdict"], serde_json::json!({ "verdict": "differs" }));
        assert_eq!(v["probes"][1]["verdict"], serde_json::json!({ "verdict": "matches" }));
        assert_eq!(
            v["probes"][5]["verdict"],
            serde_json::json!({ "verdict": "probe-failed", "reason": "CreateQueue: boom" })
        );
        assert_eq!(v["wall_ms"], 1234);
    }
}
