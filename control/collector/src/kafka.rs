//! Kafka export (`--kafka-brokers`): what intcollector decodes goes to
//! topics `<prefix>reports`, `<prefix>events`, `<prefix>flows` and
//! `<prefix>histograms`, keyed by the flow (`src:sport>dst:dport/proto`)
//! or, for histograms, the node ID, so that one flow's messages stay in
//! order in one partition. The producer's queue is bounded and never
//! waited on: a full queue drops the message and counts it; failed
//! deliveries are counted from librdkafka's delivery reports. Decoding goes
//! on whatever the brokers do.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use serde_json::{json, Value};

/// What the exporter did, for the summary.
#[derive(Debug, Default)]
pub struct KafkaCounters {
    /// Messages handed to the producer.
    pub queued: AtomicU64,
    /// Acknowledged by a broker.
    pub delivered: AtomicU64,
    /// Given up by the producer (its delivery report carried an error).
    pub delivery_failed: AtomicU64,
    /// Dropped because the producer's queue was full.
    pub queue_full: AtomicU64,
    /// Refused by the producer for another reason (a topic whose produce
    /// failed for good, a message too large, ...).
    pub send_errors: AtomicU64,
    /// Still queued when the collector stopped and the flush gave up.
    pub undelivered_at_exit: AtomicU64,
}

/// The producer's context: counts delivery reports.
#[derive(Default)]
pub struct Counting(pub KafkaCounters);

impl ClientContext for Counting {}

impl ProducerContext for Counting {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(_) => self.0.delivered.fetch_add(1, Relaxed),
            Err(_) => self.0.delivery_failed.fetch_add(1, Relaxed),
        };
    }
}

pub struct KafkaSink {
    producer: BaseProducer<Counting>,
    topics: [String; 6],
}

/// The four kinds of message, by topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    Reports,
    Events,
    Flows,
    Histograms,
    /// INT-label database updates.
    LabelDb,
    /// INT-label coverage per window.
    LabelCoverage,
}

/// Topic names below the prefix.
const NAMES: [&str; 6] = ["reports", "events", "flows", "histograms", "label-db", "label-coverage"];

/// How long the last flush waits for the brokers at exit.
const EXIT_FLUSH: Duration = Duration::from_secs(5);

impl KafkaSink {
    /// A producer for `brokers` (host:port,...), at most `queue` messages
    /// waiting. Fails only on a configuration librdkafka refuses; brokers
    /// that do not answer show up as failed deliveries.
    pub fn new(brokers: &str, prefix: &str, queue: usize) -> Result<KafkaSink, String> {
        if brokers.trim().is_empty() {
            return Err("no broker given".into());
        }
        let producer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("queue.buffering.max.messages", queue.to_string())
            .set("linger.ms", "5")
            .set("message.timeout.ms", "10000")
            .create_with_context(Counting::default())
            .map_err(|e| e.to_string())?;
        Ok(KafkaSink { producer, topics: NAMES.map(|n| format!("{prefix}{n}")) })
    }

    pub fn topic(&self, t: Topic) -> &str {
        &self.topics[t as usize]
    }

    /// Queues one message; never waits.
    pub fn send(&self, t: Topic, key: &str, payload: &str) {
        let c = &self.producer.context().0;
        let rec = BaseRecord::to(&self.topics[t as usize]).key(key).payload(payload);
        match self.producer.send(rec) {
            Ok(()) => c.queued.fetch_add(1, Relaxed),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => c.queue_full.fetch_add(1, Relaxed),
            Err(_) => c.send_errors.fetch_add(1, Relaxed),
        };
    }

    /// Serves delivery reports (and librdkafka's other callbacks); call
    /// often, it does not wait.
    pub fn poll(&self) {
        self.producer.poll(Duration::ZERO);
    }

    /// At exit: waits a while for what is queued, and counts what is left.
    pub fn finish(&self) {
        let _ = self.producer.flush(EXIT_FLUSH);
        self.poll();
        let left = self.producer.in_flight_count().max(0) as u64;
        self.producer.context().0.undelivered_at_exit.store(left, Relaxed);
    }

    pub fn counters(&self) -> &KafkaCounters {
        &self.producer.context().0
    }

    /// `{"kafka_summary":{...}}`.
    pub fn summary(&self) -> Value {
        let c = self.counters();
        json!({"kafka_summary": {
            "topics": self.topics,
            "queued": c.queued.load(Relaxed),
            "delivered": c.delivered.load(Relaxed),
            "delivery_failed": c.delivery_failed.load(Relaxed),
            "queue_full": c.queue_full.load(Relaxed),
            "send_errors": c.send_errors.load(Relaxed),
            "undelivered_at_exit": c.undelivered_at_exit.load(Relaxed),
        }})
    }
}

/// The key of a flow's messages.
fn flow_key(out: &mut String, f: [&dyn std::fmt::Display; 5]) {
    use std::fmt::Write;
    let [src, sport, dst, dport, proto] = f;
    let _ = write!(out, "{src}:{sport}>{dst}:{dport}/{proto}");
}

/// A record's message key: its flow as `src:sport>dst:dport/proto`, or a
/// histogram's node ID (`e2e` for the end-to-end one).
pub fn key_of(v: &Value) -> String {
    let f = &v["flow"];
    let mut out = String::new();
    if f.is_object() {
        let s = |k: &str| f[k].as_str().map_or_else(|| f[k].to_string(), str::to_string);
        flow_key(&mut out, [&s("src"), &f["src_port"], &s("dst"), &f["dst_port"], &f["proto"]]);
    } else {
        out = v["node_id"].as_u64().map_or_else(|| "e2e".into(), |n| n.to_string());
    }
    out
}

/// A decoded report's key, as `key_of` gives it for its JSON, written
/// into `out` (the reporting node's ID when the stack did not decode).
pub fn report_key(r: &crate::Report, out: &mut String) {
    use std::fmt::Write;
    out.clear();
    match &r.stack {
        Ok(s) => {
            let f = &s.flow;
            flow_key(out, [&f.src, &f.src_port, &f.dst, &f.dst_port, &f.proto]);
        }
        Err(_) => {
            let _ = write!(out, "{}", r.node_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_flow_or_the_node() {
        let r = json!({"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": 17, "src_port": 5, "dst_port": 53}});
        assert_eq!(key_of(&r), "10.0.0.1:5>10.0.0.2:53/17");
        assert_eq!(key_of(&json!({"type": "int_hist", "node_id": 7})), "7");
        assert_eq!(key_of(&json!({"type": "int_hist", "node_id": null})), "e2e");
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        // No broker answers on this port: messages stay queued.
        let k = KafkaSink::new("127.0.0.1:1", "t-", 2).unwrap();
        assert_eq!(k.topic(Topic::Events), "t-events");
        let t0 = std::time::Instant::now();
        for _ in 0..5 {
            k.send(Topic::Reports, "k", "{}");
        }
        assert!(t0.elapsed() < Duration::from_secs(1), "send never waits");
        let c = k.counters();
        assert_eq!((c.queued.load(Relaxed), c.queue_full.load(Relaxed)), (2, 3));
        assert!(KafkaSink::new(" ", "t-", 2).is_err());
    }
}
