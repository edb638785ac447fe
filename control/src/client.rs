//! Client side of the control socket (used by `intctl` and the tests).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde_json::{json, Value};

use crate::api::{Command, Response, PROTOCOL_VERSION};

/// An error the switch answered with, or a transport failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    pub code: String,
    pub argument: Option<String>,
    pub message: String,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

fn transport(message: String) -> CallError {
    CallError { code: "transport".into(), argument: None, message }
}

pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
}

/// What a request that meets a closed socket is told.
const CLOSED: &str = "the switch closed the connection (stopped or restarted)";

impl Client {
    pub fn connect(path: &str) -> Result<Client, CallError> {
        let s = UnixStream::connect(path).map_err(|e| transport(format!("cannot connect to {path}: {e}")))?;
        s.set_read_timeout(Some(Duration::from_secs(360))).map_err(|e| transport(e.to_string()))?;
        let writer = s.try_clone().map_err(|e| transport(e.to_string()))?;
        Ok(Client { reader: BufReader::new(s), writer, next_id: 1 })
    }

    /// Sends one request and returns its result.
    pub fn call(&mut self, cmd: &str, args: Value) -> Result<Value, CallError> {
        let id = self.next_id;
        self.next_id += 1;
        let req = json!({"version": PROTOCOL_VERSION, "id": id, "cmd": cmd, "args": args});
        writeln!(self.writer, "{req}").map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => transport(CLOSED.into()),
            _ => transport(format!("sending request: {e}")),
        })?;
        let resp = self.read_line()?;
        let r: Response = serde_json::from_str(&resp).map_err(|e| transport(format!("bad response: {e}")))?;
        match (r.ok, r.result, r.error) {
            (true, result, _) => Ok(result.unwrap_or(Value::Null)),
            (false, _, Some(e)) => Err(CallError { code: e.code, argument: e.argument, message: e.message }),
            (false, _, None) => Err(transport("a failed response without an error".into())),
        }
    }

    /// Sends command `c` and returns its typed reply; a reply that does not
    /// have the command's shape is an error (code "bad_response").
    pub fn command<C: Command>(&mut self, c: &C) -> Result<C::Reply, CallError> {
        let args = serde_json::to_value(c).map_err(|e| transport(format!("encoding {}: {e}", C::NAME)))?;
        let result = self.call(C::NAME, args)?;
        serde_json::from_value(result).map_err(|e| CallError {
            code: "bad_response".into(),
            argument: None,
            message: format!("{}: the switch's answer does not parse: {e}", C::NAME),
        })
    }

    /// Sends raw bytes (tests of malformed input).
    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes)
    }

    pub fn read_line(&mut self) -> Result<String, CallError> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err(transport(CLOSED.into())),
            Ok(_) => Ok(line),
            Err(e) => Err(transport(format!("reading response: {e}"))),
        }
    }
}
