//! Service models: what a service does with a call under the world's state, decided once for
//! both front-ends, the in-process [`crate::sim::cx::Cx`] and the wire proxies
//! ([`crate::sim::wire`]). A front-end translates a call into the model's terms and the model's
//! answer back; it does not decide. The models write the history's records
//! ([`crate::record::history`]) and nothing above.

pub mod pg;
pub mod redis;
pub mod sqs;
