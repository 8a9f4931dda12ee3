//! SQS API calls counted by operation (`SendMessage`, `ReceiveMessage`, …): an SDK interceptor
//! on every client a schedule creates, the workers' and the harness's own, so the bench can
//! say which calls a schedule makes and how many (LocalStack's CPU per call is the ceiling of
//! exploration, GUIDE.md §5).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_sqs::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_sqs::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;

/// Calls per SQS operation name, shared by the clients of one schedule. Cloning shares the
/// counts.
#[derive(Debug, Clone, Default)]
pub struct SqsCalls(Arc<Mutex<BTreeMap<String, u64>>>);

impl SqsCalls {
    /// The counts so far, by operation name (the AWS API's, e.g. `DeleteMessage`), and
    /// counting starts again from zero.
    pub fn take(&self) -> BTreeMap<String, u64> {
        self.0.lock().map(|mut m| std::mem::take(&mut *m)).unwrap_or_default()
    }

    /// The interceptor that counts into these counts, for [`super::clients::sqs_client_counted`].
    pub(crate) fn interceptor(&self) -> impl Intercept + 'static {
        Counter(self.clone())
    }

    fn add(&self, operation: &str) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry(operation.to_string()).or_default() += 1;
        }
    }
}

#[derive(Debug)]
struct Counter(SqsCalls);

impl Intercept for Counter {
    fn name(&self) -> &'static str {
        "crashpoint-sqs-calls"
    }

    // Once per execution (an operation call), after the operation's configuration (which holds
    // its name) is applied; retries are off anyway.
    fn read_before_serialization(
        &self,
        _: &BeforeSerializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(m) = cfg.load::<Metadata>() {
            self.0.add(m.name());
        }
        Ok(())
    }
}
