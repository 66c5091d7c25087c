//! The TCP forwarder in front of each mock broker: clients connect to it, it relays their
//! requests to the broker and the broker's responses back, frame by frame, and answers what
//! the mock cannot:
//!
//! - **CreateTopics** requests are not relayed: the forwarder creates each topic on the mock
//!   (through `create`, on the cluster's thread) and answers them itself;
//! - **ApiVersions** responses get CreateTopics added to the versions the broker offers, so that
//!   clients send it;
//! - **Metadata** responses name an existing broker as the controller (the mock names broker 0,
//!   which does not exist), so that admin clients find where to send CreateTopics.
//!
//! The forwarder notes the correlation id and version of each ApiVersions and Metadata request
//! on the way in to recognise its response on the way out.
//!
//! Everything else passes unchanged. Responses may reach the client in another order than its
//! requests (an answered CreateTopics overtakes the broker's responses in flight): Kafka
//! clients match responses by correlation id.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::protocol::{
    add_create_topics, create_topics_response, fix_controller, parse_create_topics, read_frame,
    request_start, response_correlation, CreateTopics, TopicOutcome, API_VERSIONS, CREATE_TOPICS,
    METADATA,
};

/// Carries out a CreateTopics request on the mock: one outcome per topic, in order; `None`
/// when the cluster is gone (the connection is then closed).
pub(super) type CreateTopicsFn =
    Arc<dyn Fn(&CreateTopics) -> Option<Vec<TopicOutcome>> + Send + Sync>;

/// How much each direction reads from its socket at once.
const READ_BUFFER: usize = 64 * 1024;
/// The most memory a direction keeps for frames between two: after a larger frame (a big
/// fetch response) its buffer is given back.
const FRAME_KEPT: usize = 1024 * 1024;

/// Accepts connections on `listener` and relays each to `target` until `stop`.
pub(super) fn spawn_forwarder(
    listener: TcpListener,
    target: String,
    stop: Arc<AtomicBool>,
    create: CreateTopicsFn,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = listener.set_nonblocking(true);
        while !stop.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((client, _)) => {
                    let _ = client.set_nonblocking(false);
                    if let Ok(server) = TcpStream::connect(&target) {
                        relay(client, server, create.clone());
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    })
}

/// Relays one connection: requests on one thread, responses on another.
fn relay(client: TcpStream, server: TcpStream, create: CreateTopicsFn) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(client_in), Ok(client_out), Ok(server_in)) =
        (client.try_clone(), client.try_clone(), server.try_clone())
    else {
        return;
    };
    let connection = Connection {
        client,
        server,
        to_client: Arc::new(Mutex::new(client_out)),
        rewritten: Arc::new(Mutex::new(HashMap::new())),
    };
    let Ok(other) = connection.try_clone() else {
        return;
    };
    std::thread::spawn(move || {
        other.requests(client_in, &*create);
        other.close();
    });
    std::thread::spawn(move || {
        connection.responses(server_in);
        connection.close();
    });
}

/// One client's connection through the forwarder.
struct Connection {
    client: TcpStream,
    server: TcpStream,
    /// Frames to the client are written whole under this lock: responses relayed and
    /// CreateTopics answers come from two threads.
    to_client: Arc<Mutex<TcpStream>>,
    /// Correlation id → key and version of each request whose response is rewritten
    /// (ApiVersions, Metadata) and has not passed yet.
    rewritten: Arc<Mutex<HashMap<i32, (i16, i16)>>>,
}

impl Connection {
    fn try_clone(&self) -> std::io::Result<Connection> {
        Ok(Connection {
            client: self.client.try_clone()?,
            server: self.server.try_clone()?,
            to_client: self.to_client.clone(),
            rewritten: self.rewritten.clone(),
        })
    }

    /// Relays the client's requests to the broker until either side closes, answering
    /// CreateTopics itself. A CreateTopics request that cannot be read, or that the cluster
    /// can no longer answer, closes the connection (as a broker does with a request it cannot
    /// read).
    fn requests(
        &self,
        client: TcpStream,
        create: &(dyn Fn(&CreateTopics) -> Option<Vec<TopicOutcome>> + Send + Sync),
    ) {
        let mut from = BufReader::with_capacity(READ_BUFFER, client);
        let mut to = &self.server;
        let mut frame = Vec::new();
        while let Ok(true) = read_frame(&mut from, &mut frame) {
            match request_start(&frame) {
                Some(start) if start.api_key == CREATE_TOPICS => {
                    let Ok(request) = parse_create_topics(&frame) else {
                        return;
                    };
                    let Some(outcomes) = create(&request) else {
                        return;
                    };
                    if !self.to_client(&create_topics_response(&request, &outcomes)) {
                        return;
                    }
                    continue;
                }
                Some(start) if start.api_key == API_VERSIONS || start.api_key == METADATA => {
                    lock(&self.rewritten)
                        .insert(start.correlation_id, (start.api_key, start.api_version));
                }
                _ => {}
            }
            if to.write_all(&frame).is_err() {
                return;
            }
            frame.shrink_to(FRAME_KEPT);
        }
    }

    /// Relays the broker's responses to the client until either side closes, adding
    /// CreateTopics to ApiVersions responses and naming a controller that exists in Metadata
    /// responses.
    fn responses(&self, server: TcpStream) {
        let mut from = BufReader::with_capacity(READ_BUFFER, server);
        let mut frame = Vec::new();
        while let Ok(true) = read_frame(&mut from, &mut frame) {
            let request = response_correlation(&frame).and_then(|id| {
                let mut pending = lock(&self.rewritten);
                match pending.is_empty() {
                    true => None,
                    false => pending.remove(&id),
                }
            });
            let rewritten = match request {
                Some((API_VERSIONS, version)) => add_create_topics(&frame, version),
                Some((_, version)) => fix_controller(&frame, version),
                None => None,
            };
            if !self.to_client(rewritten.as_deref().unwrap_or(&frame)) {
                return;
            }
            frame.shrink_to(FRAME_KEPT);
        }
    }

    /// Writes one whole frame to the client.
    fn to_client(&self, frame: &[u8]) -> bool {
        lock(&self.to_client).write_all(frame).is_ok()
    }

    /// Ends both sockets, so that the other direction's thread ends too.
    fn close(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
