//! The seven probes of [`super::calibrate`], each on queues of its own, and their shared
//! context (which records every queue created, for cleanup).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};

use super::{Behaviour, Finding, REACH_TIMEOUT_S};

/// The probes' shared context: the client, the run's queue-name prefix and every queue URL
/// created so far (deleted by [`Cx::cleanup`]).
pub(super) struct Cx<'a> {
    sqs: &'a aws_sdk_sqs::Client,
    prefix: String,
    created: Mutex<Vec<String>>,
}

impl<'a> Cx<'a> {
    /// A context for one calibration run whose queue names start with `prefix`.
    pub(super) fn new(sqs: &'a aws_sdk_sqs::Client, prefix: String) -> Self {
        Cx { sqs, prefix, created: Mutex::new(Vec::new()) }
    }
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
    pub(super) async fn cleanup(&self) {
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
pub(super) async fn stale_receipt_handle(cx: &Cx<'_>) -> Result<Finding> {
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
pub(super) async fn visibility_extend(cx: &Cx<'_>) -> Result<Finding> {
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
pub(super) async fn visibility_zero(cx: &Cx<'_>) -> Result<Finding> {
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
pub(super) async fn receive_count(cx: &Cx<'_>) -> Result<Finding> {
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
pub(super) async fn fifo_dedup_after_delete(cx: &Cx<'_>) -> Result<Finding> {
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
    let first = send("first").await.map_err(|e| sdk("SendMessage", e))?.message_id.unwrap_or_default();
    let m = cx.receive_some(&url, "first receive").await?;
    cx.delete(&url, m.receipt_handle().context("no receipt handle")?).await?;
    let resend = send("second").await;
    let delivered = cx.receive(&url, 1).await?;
    Ok(match (resend, delivered) {
        // crashpoint reads a dropped send from the answer naming the first message.
        (Ok(r), None) => {
            let answer = match r.message_id() == Some(first.as_str()) {
                true => "the answer names the first message",
                false => "the answer names a new message id",
            };
            (format!("resend with the same id after delete: accepted, not delivered ({answer})"), true)
        }
        (Ok(_), Some(m)) => (
            format!("resend with the same id after delete: accepted and delivered ({:?})", m.body().unwrap_or_default()),
            false,
        ),
        (Err(e), _) => (format!("resend with the same id after delete: rejected ({})", code(&e)), false),
    })
}

/// RedrivePolicy maxReceiveCount 2: two receives deliver; the third attempt finds the message
/// moved to the dead-letter queue.
pub(super) async fn redrive_to_dlq(cx: &Cx<'_>) -> Result<Finding> {
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
pub(super) async fn long_poll_early(cx: &Cx<'_>) -> Result<Finding> {
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

