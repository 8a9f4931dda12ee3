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

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};

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
    let cx = Cx { sqs, prefix, created: Mutex::new(Vec::new()) };
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
type Finding = (String, bool);

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

/// The probes' shared context: the client, the run's queue-name prefix and every queue URL
/// created so far (deleted by [`Cx::cleanup`]).
struct Cx<'a> {
    sqs: &'a aws_sdk_sqs::Client,
    prefix: String,
    created: Mutex<Vec<String>>,
}

fn sdk<E, R>(what: &str, e: SdkError<E, R>) -> anyhow::Error
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    anyhow!("{what}: {}", DisplayErrorContext(&e))
}

/// The error code of a failed call (`ReceiptHandleIsInvalid`, …), or the whole error.
fn code<E, R>(e: &SdkError<E, R>) -> String
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    e.code().map(str::to_string).unwrap_or_else(|| DisplayErrorContext(e).to_string())
}

fn receive_count_of(m: &Message) -> Option<u32> {
    m.attributes()?.get(&MessageSystemAttributeName::ApproximateReceiveCount)?.parse().ok()
}

impl Cx<'_> {
    /// The queue name of `probe` in this run (`suffix` e.g. `""`, `"-dlq"` or `".fifo"`).
    fn name(&self, probe: &str, suffix: &str) -> String {
        format!("{}-{probe}{suffix}", self.prefix)
    }

    /// CreateQueue with `attrs`; the URL is recorded for cleanup before anything else happens.
    async fn create(&self, name: String, attrs: &[(QueueAttributeName, String)]) -> Result<String> {
        let mut req = self.sqs.create_queue().queue_name(&name);
        for (k, v) in attrs {
            req = req.attributes(k.clone(), v.clone());
        }
        let url = req
            .send()
            .await
            .map_err(|e| sdk(&format!("CreateQueue {name}"), e))?
            .queue_url
            .context("CreateQueue returned no QueueUrl")?;
        self.created.lock().unwrap_or_else(|p| p.into_inner()).push(url.clone());
        Ok(url)
    }

    /// A standard queue with the given VisibilityTimeout (s).
    async fn standard(&self, b: Behaviour, visibility_s: u32) -> Result<String> {
        self.create(self.name(b.as_str(), ""), &[(QueueAttributeName::VisibilityTimeout, visibility_s.to_string())])
            .await
    }

    async fn send(&self, url: &str, body: &str) -> Result<()> {
        self.sqs.send_message().queue_url(url).message_body(body).send().await.map_err(|e| sdk("SendMessage", e))?;
        Ok(())
    }

    /// ReceiveMessage of at most `max` messages, long-polling `wait_s` seconds (0: short poll),
    /// with `ApproximateReceiveCount`.
    async fn receive_n(&self, url: &str, max: i32, wait_s: i32) -> Result<Vec<Message>> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(max)
            .wait_time_seconds(wait_s)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|e| sdk("ReceiveMessage", e))?;
        Ok(out.messages.unwrap_or_default())
    }

    async fn receive(&self, url: &str, wait_s: i32) -> Result<Option<Message>> {
        Ok(self.receive_n(url, 1, wait_s).await?.into_iter().next())
    }

    /// Receive that must return a message; `step` names it in the error.
    async fn receive_some(&self, url: &str, step: &str) -> Result<Message> {
        self.receive(url, 1).await?.with_context(|| format!("{step}: ReceiveMessage returned no message"))
    }

    async fn change_visibility(&self, url: &str, handle: &str, secs: i32) -> Result<()> {
        self.sqs
            .change_message_visibility()
            .queue_url(url)
            .receipt_handle(handle)
            .visibility_timeout(secs)
            .send()
            .await
            .map_err(|e| sdk(&format!("ChangeMessageVisibility {secs}"), e))?;
        Ok(())
    }

    async fn delete(&self, url: &str, handle: &str) -> Result<()> {
        self.sqs.delete_message().queue_url(url).receipt_handle(handle).send().await.map_err(|e| sdk("DeleteMessage", e))?;
        Ok(())
    }

    /// Deletes every queue recorded, then every queue still listed under this run's prefix (a
    /// CreateQueue whose answer was lost to a timeout). Errors are logged: cleanup never hides
    /// the result.
    async fn cleanup(&self) {
        let mut urls = std::mem::take(&mut *self.created.lock().unwrap_or_else(|p| p.into_inner()));
        let listed = tokio::time::timeout(
            Duration::from_secs(REACH_TIMEOUT_S),
            self.sqs.list_queues().queue_name_prefix(&self.prefix).send(),
        )
        .await;
        if let Ok(Ok(out)) = listed {
            for u in out.queue_urls() {
                if !urls.contains(u) {
                    urls.push(u.clone());
                }
            }
        }
        for url in urls {
            let r = tokio::time::timeout(
                Duration::from_secs(REACH_TIMEOUT_S),
                self.sqs.delete_queue().queue_url(&url).send(),
            )
            .await;
            match r {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!("calibration: DeleteQueue {url}: {}", DisplayErrorContext(&e)),
                Err(_) => tracing::warn!("calibration: DeleteQueue {url}: no answer within {REACH_TIMEOUT_S} s"),
            }
        }
    }
}

/// Receive (h1), ChangeMessageVisibility 0, receive again (h2), DeleteMessage with h1; then
/// make the message visible with h2 and receive: is it still there?
async fn stale_receipt_handle(cx: &Cx<'_>) -> Result<Finding> {
    let url = cx.standard(Behaviour::StaleReceiptHandle, 30).await?;
    cx.send(&url, "stale-receipt-handle").await?;
    let first = cx.receive_some(&url, "first receive").await?;
    let h1 = first.receipt_handle().context("no receipt handle")?.to_string();
    cx.change_visibility(&url, &h1, 0).await?;
    let second = cx.receive_some(&url, "second receive").await?;
    let h2 = second.receipt_handle().context("no receipt handle")?.to_string();
    if h1 == h2 {
        return Ok(("the second receive returned the same receipt handle as the first".into(), false));
    }
    let stale_delete = cx.sqs.delete_message().queue_url(&url).receipt_handle(&h1).send().await;
    // Bring the message back with the newest handle (fails when it is gone), then look for it.
    let _ = cx.change_visibility(&url, &h2, 0).await;
    let kept = cx.receive(&url, 1).await?.is_some();
    let fate = if kept { "message kept (received again)" } else { "message deleted" };
    Ok(match stale_delete {
        Ok(_) => (format!("DeleteMessage with the older handle: OK; {fate}"), kept),
        Err(e) => (format!("DeleteMessage with the older handle: error {}; {fate}", code(&e)), false),
    })
}

/// Queue VisibilityTimeout 1 s; two messages received, one extended to 30 s, the other left as
/// a control. From 1.2 s after the receive, long-poll until the control is back: the extended
/// one must still be hidden then. (The control makes the probe independent of how late an
/// endpoint expires timeouts: LocalStack re-queues expired messages once a second.)
async fn visibility_extend(cx: &Cx<'_>) -> Result<Finding> {
    let url = cx.standard(Behaviour::VisibilityExtend, 1).await?;
    cx.send(&url, "a").await?;
    cx.send(&url, "b").await?;
    let extended = cx.receive_some(&url, "first receive").await?;
    let received_at = Instant::now();
    let control = cx.receive_some(&url, "second receive").await?;
    cx.change_visibility(&url, extended.receipt_handle().context("no receipt handle")?, 30).await?;
    tokio::time::sleep_until((received_at + Duration::from_millis(1200)).into()).await;
    let (ext_id, ctl_id) = (extended.message_id().unwrap_or_default(), control.message_id().unwrap_or_default());
    let mut seen = cx.receive_n(&url, 10, 1).await?;
    let back_ms = received_at.elapsed().as_millis();
    if !seen.iter().any(|m| m.message_id() == Some(ext_id)) {
        // A long poll may return as soon as one message is back; look once more.
        seen.extend(cx.receive_n(&url, 10, 0).await?);
    }
    let ext_back = seen.iter().any(|m| m.message_id() == Some(ext_id));
    let ctl_back = seen.iter().any(|m| m.message_id() == Some(ctl_id));
    Ok(match (ext_back, ctl_back) {
        (false, true) => {
            (format!("extended to 30 s: still hidden at {back_ms} ms, when an unextended control was back"), true)
        }
        (true, _) => (format!("extended to 30 s: redelivered at {back_ms} ms, as if not extended"), false),
        (false, false) => bail!("an unextended control message was not back {back_ms} ms after its 1 s timeout"),
    })
}

/// Receive, ChangeMessageVisibility 0, receive again (long poll of 1 s, so an empty answer is
/// not a short-poll sampling artefact).
async fn visibility_zero(cx: &Cx<'_>) -> Result<Finding> {
    let url = cx.standard(Behaviour::VisibilityZero, 30).await?;
    cx.send(&url, "visibility-zero").await?;
    let m = cx.receive_some(&url, "first receive").await?;
    cx.change_visibility(&url, m.receipt_handle().context("no receipt handle")?, 0).await?;
    let t = Instant::now();
    Ok(match cx.receive(&url, 1).await? {
        Some(again) if again.message_id() == m.message_id() => {
            (format!("received again {} ms after the change (queue timeout 30 s)", t.elapsed().as_millis()), true)
        }
        Some(_) => bail!("the second receive returned a different message"),
        None => ("not receivable within 1 s of the change (queue timeout 30 s)".into(), false),
    })
}

/// Receive, ChangeMessageVisibility 0, receive: ApproximateReceiveCount 1, then 2.
async fn receive_count(cx: &Cx<'_>) -> Result<Finding> {
    let url = cx.standard(Behaviour::ReceiveCount, 30).await?;
    cx.send(&url, "receive-count").await?;
    let first = cx.receive_some(&url, "first receive").await?;
    cx.change_visibility(&url, first.receipt_handle().context("no receipt handle")?, 0).await?;
    let second = cx.receive_some(&url, "second receive").await?;
    let show = |c: Option<u32>| c.map_or("absent".to_string(), |c| c.to_string());
    let (c1, c2) = (receive_count_of(&first), receive_count_of(&second));
    Ok((format!("ApproximateReceiveCount {} then {}", show(c1), show(c2)), c1 == Some(1) && c2 == Some(2)))
}

/// FIFO: send with a MessageDeduplicationId, receive, delete, send again with the same id.
async fn fifo_dedup_after_delete(cx: &Cx<'_>) -> Result<Finding> {
    let b = Behaviour::FifoDedupAfterDelete;
    let url = cx
        .create(
            cx.name(b.as_str(), ".fifo"),
            &[
                (QueueAttributeName::FifoQueue, "true".into()),
                (QueueAttributeName::ContentBasedDeduplication, "false".into()),
                (QueueAttributeName::VisibilityTimeout, "30".into()),
            ],
        )
        .await?;
    let send = |body: &'static str| {
        cx.sqs
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .message_group_id("calibrate")
            .message_deduplication_id("calibrate-dedup-1")
            .send()
    };
    send("first").await.map_err(|e| sdk("SendMessage", e))?;
    let m = cx.receive_some(&url, "first receive").await?;
    cx.delete(&url, m.receipt_handle().context("no receipt handle")?).await?;
    let resend = send("second").await;
    let delivered = cx.receive(&url, 1).await?;
    Ok(match (resend, delivered) {
        (Ok(_), None) => ("resend with the same id after delete: accepted, not delivered".into(), true),
        (Ok(_), Some(m)) => (
            format!("resend with the same id after delete: accepted and delivered ({:?})", m.body().unwrap_or_default()),
            false,
        ),
        (Err(e), _) => (format!("resend with the same id after delete: rejected ({})", code(&e)), false),
    })
}

/// RedrivePolicy maxReceiveCount 2: two receives deliver; the third attempt finds the message
/// moved to the dead-letter queue.
async fn redrive_to_dlq(cx: &Cx<'_>) -> Result<Finding> {
    const MAX_RECEIVES: u32 = 2;
    let b = Behaviour::RedriveToDlq;
    let dlq = cx.create(cx.name(b.as_str(), "-dlq"), &[]).await?;
    let arn = cx
        .sqs
        .get_queue_attributes()
        .queue_url(&dlq)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| sdk("GetQueueAttributes QueueArn", e))?
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .cloned()
        .context("GetQueueAttributes returned no QueueArn")?;
    let policy = serde_json::json!({ "deadLetterTargetArn": arn, "maxReceiveCount": MAX_RECEIVES.to_string() });
    let url = cx
        .create(
            cx.name(b.as_str(), ""),
            &[
                (QueueAttributeName::VisibilityTimeout, "30".into()),
                (QueueAttributeName::RedrivePolicy, policy.to_string()),
            ],
        )
        .await?;
    cx.send(&url, "redrive-to-dlq").await?;
    for i in 1..=MAX_RECEIVES {
        let m = cx.receive_some(&url, &format!("receive {i}")).await?;
        cx.change_visibility(&url, m.receipt_handle().context("no receipt handle")?, 0).await?;
    }
    let again = cx.receive(&url, 1).await?;
    let dead = cx.receive(&dlq, 1).await?;
    Ok(match (again, dead) {
        (None, Some(_)) => (format!("moved to the DLQ after {MAX_RECEIVES} receives (maxReceiveCount {MAX_RECEIVES})"), true),
        (Some(m), _) => (
            format!(
                "receive {} still delivered it from the source queue (maxReceiveCount {MAX_RECEIVES})",
                receive_count_of(&m).map_or("3".into(), |c| c.to_string())
            ),
            false,
        ),
        (None, None) => ("gone from the source queue but not in the DLQ".into(), false),
    })
}

/// Start a 5 s long poll on an empty queue, send 300 ms later: the poll must return with the
/// message well before its 5 s (here: within half of it).
async fn long_poll_early(cx: &Cx<'_>) -> Result<Finding> {
    const WAIT_S: i32 = 5;
    const SEND_AFTER_MS: u64 = 300;
    let url = cx.standard(Behaviour::LongPollEarly, 30).await?;
    let t = Instant::now();
    let (got, sent) = tokio::join!(cx.receive(&url, WAIT_S), async {
        tokio::time::sleep(Duration::from_millis(SEND_AFTER_MS)).await;
        cx.send(&url, "long-poll-early").await
    });
    let elapsed_ms = t.elapsed().as_millis() as u64;
    sent?;
    let got = got?;
    Ok(match got {
        Some(_) if elapsed_ms < (WAIT_S as u64 * 1000) / 2 => (
            format!("{WAIT_S} s poll, message sent at {SEND_AFTER_MS} ms: returned with it at {elapsed_ms} ms"),
            true,
        ),
        Some(_) => (
            format!("{WAIT_S} s poll, message sent at {SEND_AFTER_MS} ms: returned with it only at {elapsed_ms} ms"),
            false,
        ),
        None => (format!("{WAIT_S} s poll, message sent at {SEND_AFTER_MS} ms: returned empty at {elapsed_ms} ms"), false),
    })
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
