//! `crashpoint doctor --calibrate` against the native LocalStack: the probes' verdicts as GUIDE.md
//! §5 records them, no calibration queue left behind, and the table as the binary prints it.

use std::process::Command;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crashpoint::services::calibrate::{calibrate, Behaviour, Verdict, QUEUE_PREFIX};
use crashpoint::services::clients::sqs_client;

#[test]
fn localstack_differs_only_on_stale_receipt_handles_and_leaves_no_queue() {
    let endpoints = crashpoint::testkit::endpoints();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let sqs = sqs_client(&endpoints.sqs_endpoint_url);
        let cal = calibrate(&sqs, &endpoints.sqs_endpoint_url).await.expect("calibration runs");
        let table = cal.table();
        println!("{table}");
        assert_eq!(cal.probes.len(), Behaviour::ALL.len(), "{table}");
        for b in Behaviour::ALL {
            // GUIDE.md §5: LocalStack 4.13.1 deletes the message on a stale-handle DeleteMessage,
            // where AWS documents that it might stay.
            let expected = if b == Behaviour::StaleReceiptHandle { Verdict::Differs } else { Verdict::Matches };
            assert_eq!(cal.verdict(b), Some(&expected), "{b}:\n{table}");
            assert_eq!(cal.deviates(b), b == Behaviour::StaleReceiptHandle, "{b}");
        }
        assert!(cal.failed().is_empty(), "{table}");
        assert!(table.lines().last().unwrap().contains("differs from AWS: stale-receipt-handle"), "{table}");

        let left = sqs.list_queues().queue_name_prefix(QUEUE_PREFIX).send().await.unwrap();
        assert!(left.queue_urls().is_empty(), "calibration queues left behind: {:?}", left.queue_urls());
    });
}

#[test]
fn doctor_calibrate_prints_the_table_and_exits_0() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_crashpoint"));
    for k in
        ["DATABASE_URL", "SQS_ENDPOINT_URL", "REDIS_URL", "DOCKER_HOST", crashpoint::services::external::SQS_SHARDS_VAR]
    {
        c.env_remove(k);
    }
    let o = c.args(["doctor", "--calibrate"]).output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("all three services reachable"), "{out}");
    assert!(out.contains("SQS calibration against http://127.0.0.1:"), "{out}");
    for b in Behaviour::ALL {
        let row = out.lines().find(|l| l.trim_start().starts_with(b.as_str()));
        let row = row.unwrap_or_else(|| panic!("no row for {b}:\n{out}"));
        assert!(row.contains(b.aws()), "{row}");
        assert!(out.contains(b.source()), "no source for {b}:\n{out}");
        let mark = if b == Behaviour::StaleReceiptHandle { "DIFFERS" } else { "yes" };
        assert!(row.contains(mark), "{b} should be marked {mark}: {row}");
    }
    assert!(out.contains("differs from AWS: stale-receipt-handle; probes failed: none"), "{out}");
}

#[test]
fn an_unreachable_endpoint_is_an_error() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // Port 1 on loopback: nothing listens there, the connection is refused at once.
    let err = rt.block_on(calibrate(&sqs_client("http://127.0.0.1:1"), "http://127.0.0.1:1")).unwrap_err();
    assert!(format!("{err:#}").contains("unreachable"), "{err:#}");
}

#[test]
fn probes_whose_calls_fail_become_failed_rows() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(refusing_sqs(sock));
            }
        });
        let cal = calibrate(&sqs_client(&url), &url).await.expect("ListQueues answers, so the endpoint is reachable");
        let table = cal.table();
        assert_eq!(cal.failed().len(), Behaviour::ALL.len(), "{table}");
        for p in &cal.probes {
            assert!(cal.deviates(p.behaviour));
            let Verdict::ProbeFailed(reason) = &p.verdict else { panic!("{:?}", p.verdict) };
            assert!(reason.contains("CreateQueue") && reason.contains("CalibrationTestRefusal"), "{reason}");
            assert_eq!(p.observed, format!("probe failed: {reason}"));
        }
        let names: Vec<&str> = Behaviour::ALL.iter().map(|b| b.as_str()).collect();
        assert!(table.ends_with(&format!("differs from AWS: none; probes failed: {}\n", names.join(", "))), "{table}");
    });
}

/// One connection of a fake SQS (JSON protocol): ListQueues answers with no queue, every other
/// action is refused with a 400 `CalibrationTestRefusal`.
async fn refusing_sqs(mut sock: tokio::net::TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let body_len: usize =
            head.lines().find_map(|l| l.strip_prefix("content-length:")).map_or(0, |v| v.trim().parse().unwrap_or(0));
        while buf.len() < head_end + body_len {
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..head_end + body_len);
        let (status, body) = if head.contains("amazonsqs.listqueues") {
            ("200 OK", r#"{}"#)
        } else {
            (
                "400 Bad Request",
                r#"{"__type":"com.amazonaws.sqs#CalibrationTestRefusal","message":"refused by the test endpoint"}"#,
            )
        };
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if sock.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}
