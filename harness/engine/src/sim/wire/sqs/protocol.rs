//! The SQS wire forms the proxy reads and writes: a request in JSON (`X-Amz-Target:
//! AmazonSQS.<Op>`) or query form (`Action=<Op>`), its parameters and batch entries, the replies
//! the proxy makes itself, and a ReceiveMessage reply's messages.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use crate::sim::model::sqs::Got;

/// The wire form of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Proto {
    Json,
    Query,
}

/// One parsed SQS request.
pub(super) struct Call {
    pub(super) proto: Proto,
    pub(super) op: String,
    pub(super) json: serde_json::Value,
    pub(super) form: Vec<(String, String)>,
}

impl Call {
    pub(super) fn parse(headers: &hyper::HeaderMap, body: &[u8]) -> Option<Call> {
        if let Some(t) = headers.get("x-amz-target").and_then(|v| v.to_str().ok()) {
            let op = t.strip_prefix("AmazonSQS.")?.to_string();
            let json = serde_json::from_slice(body).unwrap_or(serde_json::Value::Null);
            return Some(Call {
                proto: Proto::Json,
                op,
                json,
                form: vec![],
            });
        }
        let form: Vec<(String, String)> = url::form_urlencoded::parse(body).into_owned().collect();
        let op = form.iter().find(|(k, _)| k == "Action")?.1.clone();
        Some(Call {
            proto: Proto::Query,
            op,
            json: serde_json::Value::Null,
            form,
        })
    }

    /// The request body with parameter `key` set to `value` (a number in JSON).
    pub(super) fn with_param(&self, key: &str, value: &str) -> Bytes {
        match self.proto {
            Proto::Json => {
                let mut v = self.json.clone();
                if let Some(o) = v.as_object_mut() {
                    let n = value
                        .parse::<u64>()
                        .map(serde_json::Value::from)
                        .unwrap_or_else(|_| value.into());
                    o.insert(key.to_string(), n);
                }
                Bytes::from(v.to_string())
            }
            Proto::Query => {
                let mut out = url::form_urlencoded::Serializer::new(String::new());
                for (k, v) in &self.form {
                    out.append_pair(k, if k == key { value } else { v });
                }
                Bytes::from(out.finish())
            }
        }
    }

    pub(super) fn param(&self, key: &str) -> Option<String> {
        match self.proto {
            Proto::Json => match self.json.get(key)? {
                serde_json::Value::String(s) => Some(s.clone()),
                v => Some(v.to_string()),
            },
            Proto::Query => self
                .form
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone()),
        }
    }

    /// For a batch operation, the query protocol's entry prefix and the field that names each
    /// entry's message: its receipt handle, or for SendMessageBatch its body.
    pub(super) fn batch_field(&self) -> Option<(&'static str, &'static str)> {
        Some(match self.op.as_str() {
            "DeleteMessageBatch" => ("DeleteMessageBatchRequestEntry", "ReceiptHandle"),
            "ChangeMessageVisibilityBatch" => ("ChangeMessageVisibilityBatchRequestEntry", "ReceiptHandle"),
            "SendMessageBatch" => ("SendMessageBatchRequestEntry", "MessageBody"),
            _ => return None,
        })
    }

    /// The entries of a batch request, in request order, as (`Id`, `field`): JSON `Entries`,
    /// or the query protocol's `<prefix>.<n>.Id` and `<prefix>.<n>.<field>`.
    pub(super) fn entries(&self, prefix: &str, field: &str) -> Vec<(String, String)> {
        match self.proto {
            Proto::Json => self
                .json
                .get("Entries")
                .and_then(|e| e.as_array())
                .into_iter()
                .flatten()
                .map(|e| {
                    // A number (VisibilityTimeout) as its text, as the query protocol has it.
                    let value = match e.get(field) {
                        Some(serde_json::Value::String(s)) => s.clone(),
                        Some(serde_json::Value::Null) | None => String::new(),
                        Some(v) => v.to_string(),
                    };
                    (str_of(e, "Id"), value)
                })
                .collect(),
            Proto::Query => (1..)
                .map_while(|n| {
                    let get = |k: &str| {
                        self.form
                            .iter()
                            .find(|(key, _)| *key == format!("{prefix}.{n}.{k}"))
                            .map(|(_, v)| v.clone())
                    };
                    Some((get("Id")?, get(field).unwrap_or_default()))
                })
                .collect(),
        }
    }

    /// A batch operation's reply: the ids that succeeded, and the failed ones with their
    /// error code (`SenderFault` false), in this request's wire form.
    pub(super) fn batch_reply(
        &self,
        successful: &[String],
        failed: &[(String, String)],
    ) -> Response<Full<Bytes>> {
        match self.proto {
            Proto::Json => {
                let ok: Vec<serde_json::Value> = successful
                    .iter()
                    .map(|id| serde_json::json!({ "Id": id }))
                    .collect();
                let bad: Vec<serde_json::Value> = failed
                    .iter()
                    .map(|(id, code)| serde_json::json!({ "Id": id, "SenderFault": false, "Code": code, "Message": "crashpoint: entry failed" }))
                    .collect();
                let body = serde_json::json!({ "Successful": ok, "Failed": bad }).to_string();
                reply(StatusCode::OK, "application/x-amz-json-1.0", body, None)
            }
            Proto::Query => {
                let esc = |s: &str| quick_xml::escape::escape(s).into_owned();
                let mut result = String::new();
                for id in successful {
                    result.push_str(&format!(
                        "<{0}ResultEntry><Id>{1}</Id></{0}ResultEntry>",
                        self.op,
                        esc(id)
                    ));
                }
                for (id, code) in failed {
                    result.push_str(&format!(
                        "<BatchResultErrorEntry><Id>{}</Id><SenderFault>false</SenderFault><Code>{}</Code><Message>crashpoint: entry failed</Message></BatchResultErrorEntry>",
                        esc(id),
                        esc(code)
                    ));
                }
                self.ok_reply(&format!("<{0}Result>{result}</{0}Result>", self.op))
            }
        }
    }

    /// A success reply without content, in this request's wire form.
    pub(super) fn ok_reply(&self, result: &str) -> Response<Full<Bytes>> {
        match self.proto {
            Proto::Json => reply(
                StatusCode::OK,
                "application/x-amz-json-1.0",
                "{}".into(),
                None,
            ),
            Proto::Query => {
                let op = &self.op;
                let body = format!(
                    "<?xml version=\"1.0\"?><{op}Response xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\">{result}\
                     <ResponseMetadata><RequestId>00000000-0000-0000-0000-000000000000</RequestId></ResponseMetadata></{op}Response>"
                );
                reply(StatusCode::OK, "text/xml", body, None)
            }
        }
    }

    /// A client error the SDKs do not retry (`InvalidParameterValue`, HTTP 400).
    pub(super) fn error_reply(&self, message: &str) -> Response<Full<Bytes>> {
        match self.proto {
            Proto::Json => {
                let body = serde_json::json!({"__type": "com.amazonaws.sqs#InvalidParameterValue", "message": message}).to_string();
                reply(
                    StatusCode::BAD_REQUEST,
                    "application/x-amz-json-1.0",
                    body,
                    Some("AWS.SimpleQueueService.InvalidParameterValue;Sender"),
                )
            }
            Proto::Query => {
                let body = format!(
                    "<?xml version=\"1.0\"?><ErrorResponse><Error><Type>Sender</Type><Code>InvalidParameterValue</Code>\
                     <Message>{}</Message></Error><RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>",
                    quick_xml::escape::escape(message)
                );
                reply(StatusCode::BAD_REQUEST, "text/xml", body, None)
            }
        }
    }
}

pub(super) fn reply(
    status: StatusCode,
    content_type: &str,
    body: String,
    query_error: Option<&str>,
) -> Response<Full<Bytes>> {
    let mut b = Response::builder()
        .status(status)
        .header("content-type", content_type);
    if let Some(q) = query_error {
        b = b.header("x-amzn-query-error", q);
    }
    b.body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

/// The messages of a ReceiveMessage reply, in its order.
pub(super) fn parse_received(proto: Proto, body: &[u8]) -> Vec<Got> {
    match proto {
        Proto::Json => {
            let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            v.get("Messages")
                .and_then(|m| m.as_array())
                .map(|ms| {
                    ms.iter()
                        .map(|m| Got {
                            id: str_of(m, "MessageId"),
                            receipt: str_of(m, "ReceiptHandle"),
                            body: str_of(m, "Body"),
                            receive_count: m
                                .get("Attributes")
                                .map(|a| str_of(a, "ApproximateReceiveCount"))
                                .and_then(|c| c.parse().ok()),
                        })
                        .collect()
                })
                .unwrap_or_default()
        }
        Proto::Query => {
            let text = String::from_utf8_lossy(body);
            text.split("<Message>")
                .skip(1)
                .map(|m| {
                    let count = m
                        .split("<Attribute>")
                        .find(|a| a.contains("<Name>ApproximateReceiveCount</Name>"))
                        .and_then(|a| xml_tag(a, "Value"))
                        .and_then(|c| c.parse().ok());
                    Got {
                        id: xml_tag(m, "MessageId").unwrap_or_default(),
                        receipt: xml_tag(m, "ReceiptHandle").unwrap_or_default(),
                        body: xml_tag(m, "Body").unwrap_or_default(),
                        receive_count: count,
                    }
                })
                .collect()
        }
    }
}

/// The error code of an SQS error body: JSON `__type` (after its `#`) or query XML `<Code>`.
pub(super) fn error_code(body: &[u8]) -> Option<String> {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        let t = str_of(&v, "__type");
        return Some(t.rsplit('#').next().unwrap_or_default().to_string());
    }
    xml_tag(&String::from_utf8_lossy(body), "Code")
}

pub(super) fn str_of(v: &serde_json::Value, key: &str) -> String {
    v.get(key)
        .and_then(|s| s.as_str())
        .unwrap_or_default()
        .to_string()
}

/// The unescaped text of the first `<tag>…</tag>` in `xml`.
pub(super) fn xml_tag(xml: &str, tag: &str) -> Option<String> {
    let start = xml.find(&format!("<{tag}>"))? + tag.len() + 2;
    let end = start + xml[start..].find(&format!("</{tag}>"))?;
    quick_xml::escape::unescape(&xml[start..end])
        .ok()
        .map(|s| s.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_wire_forms_parse() {
        let mut h = hyper::HeaderMap::new();
        h.insert("x-amz-target", "AmazonSQS.DeleteMessage".parse().unwrap());
        let c = Call::parse(
            &h,
            br#"{"QueueUrl":"http://x/000000000000/q","ReceiptHandle":"r1"}"#,
        )
        .unwrap();
        assert_eq!(
            (c.op.as_str(), c.param("ReceiptHandle").as_deref()),
            ("DeleteMessage", Some("r1"))
        );
        let c = Call::parse(
            &hyper::HeaderMap::new(),
            b"Action=ReceiveMessage&Version=2012-11-05&QueueUrl=http%3A%2F%2Fx%2Fq",
        )
        .unwrap();
        assert_eq!(
            (c.proto, c.op.as_str(), c.param("QueueUrl").as_deref()),
            (Proto::Query, "ReceiveMessage", Some("http://x/q"))
        );
    }

    #[test]
    fn received_messages_parse_from_json_and_xml() {
        let json = br#"{"Messages":[{"MessageId":"a","ReceiptHandle":"r","Body":"{\"x\":1}","Attributes":{"ApproximateReceiveCount":"2"}}]}"#;
        let m = parse_received(Proto::Json, json);
        assert_eq!(
            (
                m[0].id.as_str(),
                m[0].receipt.as_str(),
                m[0].body.as_str(),
                m[0].receive_count
            ),
            ("a", "r", "{\"x\":1}", Some(2))
        );
        let xml = b"<ReceiveMessageResponse><ReceiveMessageResult><Message><MessageId>b</MessageId><ReceiptHandle>s</ReceiptHandle>\
            <Body>{&quot;x&quot;:1}</Body><Attribute><Name>ApproximateReceiveCount</Name><Value>3</Value></Attribute></Message>\
            </ReceiveMessageResult></ReceiveMessageResponse>";
        let m = parse_received(Proto::Query, xml);
        assert_eq!(
            (m[0].id.as_str(), m[0].body.as_str(), m[0].receive_count),
            ("b", "{\"x\":1}", Some(3))
        );
        assert!(parse_received(Proto::Json, b"{}").is_empty());
        assert_eq!(
            error_code(br#"{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"x"}"#)
                .as_deref(),
            Some("QueueDoesNotExist")
        );
    }
}
