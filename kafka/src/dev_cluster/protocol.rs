//! The few Kafka protocol pieces the forwarder in front of the mock cluster speaks itself
//! ([`super::forwarder`]): size-prefixed frames, the fixed start of a request header, the
//! ApiVersions response with CreateTopics added, the Metadata response with a controller that
//! exists, and CreateTopics requests and responses.
//!
//! Encoding and decoding are `kafka-protocol`'s (types generated from Kafka's message specs);
//! this module only picks what the mock cluster lacks.

use std::io::{self, Read};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, CreateTopicsRequest, CreateTopicsResponse, MetadataResponse,
    RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

/// The ApiVersions request's key.
pub(super) const API_VERSIONS: i16 = ApiKey::ApiVersions as i16;
/// The Metadata request's key.
pub(super) const METADATA: i16 = ApiKey::Metadata as i16;
/// The CreateTopics request's key.
pub(super) const CREATE_TOPICS: i16 = ApiKey::CreateTopics as i16;
/// The CreateTopics versions answered: 2–4 (classic encoding) and 5–6 (flexible). Kafka 4
/// dropped 0 and 1; 7 would have to name the topic's id, which the mock does not tell.
pub(super) const CREATE_TOPICS_VERSIONS: std::ops::RangeInclusive<i16> = 2..=6;

/// Kafka's error codes the answers use.
pub(super) mod code {
    /// The topic name is not a legal one.
    pub const INVALID_TOPIC: i16 = 17;
    /// The topic exists already.
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    /// The partition count is below 1.
    pub const INVALID_PARTITIONS: i16 = 37;
    /// The replication factor is below 1 or above the number of brokers.
    pub const INVALID_REPLICATION_FACTOR: i16 = 38;
}

/// The most bytes a frame may hold (Kafka's `socket.request.max.bytes` is 100 MB; fetch
/// responses can be larger): a larger size is taken as a broken stream.
const MAX_FRAME: usize = 1 << 30;

/// Reads one frame, its int32 size prefix included, into `frame`. `Ok(false)` when the stream
/// ends (cleanly or within a frame: either way there is nothing more to relay).
pub(super) fn read_frame(from: &mut impl Read, frame: &mut Vec<u8>) -> io::Result<bool> {
    let mut size = [0u8; 4];
    match from.read_exact(&mut size) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
        Err(e) => return Err(e),
    }
    let n = i32::from_be_bytes(size);
    if n < 0 || n as usize > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a Kafka frame of {n} bytes"),
        ));
    }
    frame.clear();
    frame.extend_from_slice(&size);
    frame.resize(4 + n as usize, 0);
    match from.read_exact(&mut frame[4..]) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// The start every request header has, whatever its version: key, version, correlation id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RequestStart {
    /// The request's key.
    pub api_key: i16,
    /// Its version.
    pub api_version: i16,
    /// The id the response carries.
    pub correlation_id: i32,
}

/// The [`RequestStart`] of a request frame (size prefix included), if it is long enough.
pub(super) fn request_start(frame: &[u8]) -> Option<RequestStart> {
    let b = frame.get(4..12)?;
    Some(RequestStart {
        api_key: i16::from_be_bytes([b[0], b[1]]),
        api_version: i16::from_be_bytes([b[2], b[3]]),
        correlation_id: i32::from_be_bytes([b[4], b[5], b[6], b[7]]),
    })
}

/// The correlation id of a response frame (size prefix included): the first field of every
/// response header.
pub(super) fn response_correlation(frame: &[u8]) -> Option<i32> {
    let b = frame.get(4..8)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The ApiVersions response `frame` (of request version `version`) with CreateTopics added
/// ([`CREATE_TOPICS_VERSIONS`]) and its size prefix rewritten; `None` when it is to be relayed
/// as it is: an error response, one that lists CreateTopics already, or one that does not
/// decode.
pub(super) fn add_create_topics(frame: &[u8], version: i16) -> Option<Vec<u8>> {
    rewrite(frame, version, |response: &mut ApiVersionsResponse| {
        if response.error_code != 0 || response.api_keys.iter().any(|k| k.api_key == CREATE_TOPICS)
        {
            return false;
        }
        response.api_keys.push(
            ApiVersion::default()
                .with_api_key(CREATE_TOPICS)
                .with_min_version(*CREATE_TOPICS_VERSIONS.start())
                .with_max_version(*CREATE_TOPICS_VERSIONS.end()),
        );
        true
    })
}

/// The Metadata response `frame` (of request version `version`) naming the lowest of its
/// brokers as the controller; `None` when it is to be relayed as it is: its controller is one
/// of its brokers (or it has none to name), or it does not decode. The mock cluster always
/// names broker 0, which does not exist (its brokers are 1 to N), and admin clients send
/// CreateTopics to the controller.
pub(super) fn fix_controller(frame: &[u8], version: i16) -> Option<Vec<u8>> {
    if version < 1 {
        // No controller in version 0.
        return None;
    }
    rewrite(frame, version, |response: &mut MetadataResponse| {
        let lowest = response.brokers.iter().map(|b| b.node_id).min();
        match lowest {
            Some(id)
                if !response
                    .brokers
                    .iter()
                    .any(|b| b.node_id == response.controller_id) =>
            {
                response.controller_id = id;
                true
            }
            _ => false,
        }
    })
}

/// Decodes the response `frame` of request version `version` as an `R`, lets `change` change
/// it, and encodes it again with its size prefix; `None` when it does not decode, or `change`
/// says it is to be relayed as it is. Bytes after the response are kept after it as they were
/// (the mock ends its flexible Metadata responses with one empty tag buffer too many, which
/// clients skip).
fn rewrite<R: Decodable + Encodable + HeaderVersion>(
    frame: &[u8],
    version: i16,
    change: impl FnOnce(&mut R) -> bool,
) -> Option<Vec<u8>> {
    let mut body = Bytes::copy_from_slice(frame.get(4..)?);
    // ApiVersions responses keep header version 0 even when flexible (KIP-511).
    let header_version = R::header_version(version);
    let header = ResponseHeader::decode(&mut body, header_version).ok()?;
    let mut response = R::decode(&mut body, version).ok()?;
    if !change(&mut response) {
        return None;
    }
    let mut out = BytesMut::new();
    out.extend_from_slice(&[0; 4]);
    header.encode(&mut out, header_version).ok()?;
    response.encode(&mut out, version).ok()?;
    out.extend_from_slice(&body);
    Some(framed(out))
}

/// Writes the size prefix of `out` (whose first four bytes are kept for it).
fn framed(mut out: BytesMut) -> Vec<u8> {
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    out.to_vec()
}

/// One topic a CreateTopics request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct WantedTopic {
    /// Its name.
    pub name: String,
    /// Partitions asked for (-1: the broker's default; from the manual assignment if any).
    pub partitions: i32,
    /// Replicas asked for (-1: the broker's default; from the manual assignment if any).
    pub replication: i32,
}

/// A decoded CreateTopics request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CreateTopics {
    /// Its version (one of [`CREATE_TOPICS_VERSIONS`]).
    pub version: i16,
    /// The id its response carries.
    pub correlation_id: i32,
    /// The topics, in the request's order.
    pub topics: Vec<WantedTopic>,
    /// Only check, create nothing.
    pub validate_only: bool,
}

/// Decodes a CreateTopics request frame (size prefix included).
pub(super) fn parse_create_topics(frame: &[u8]) -> Result<CreateTopics, String> {
    let start = request_start(frame).ok_or("a request frame shorter than its header")?;
    let version = start.api_version;
    if !CREATE_TOPICS_VERSIONS.contains(&version) {
        return Err(format!(
            "CreateTopics version {version} (this forwarder answers {}–{})",
            CREATE_TOPICS_VERSIONS.start(),
            CREATE_TOPICS_VERSIONS.end()
        ));
    }
    let mut body = Bytes::copy_from_slice(&frame[4..]);
    let header_version = ApiKey::CreateTopics.request_header_version(version);
    let header = RequestHeader::decode(&mut body, header_version)
        .map_err(|e| format!("a CreateTopics request header that does not decode: {e}"))?;
    let request = CreateTopicsRequest::decode(&mut body, version)
        .map_err(|e| format!("a CreateTopics request that does not decode: {e}"))?;
    Ok(CreateTopics {
        version,
        correlation_id: header.correlation_id,
        topics: request.topics.iter().map(wanted).collect(),
        validate_only: request.validate_only,
    })
}

/// What `topic` asks for; a manual assignment gives the counts (one entry per partition).
fn wanted(topic: &CreatableTopic) -> WantedTopic {
    let (partitions, replication) = match topic.assignments.first() {
        Some(first) => (
            topic.assignments.len() as i32,
            first.broker_ids.len() as i32,
        ),
        None => (topic.num_partitions, i32::from(topic.replication_factor)),
    };
    WantedTopic {
        name: topic.name.0.to_string(),
        partitions,
        replication,
    }
}

/// What became of one topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct TopicOutcome {
    /// Kafka's error code, 0 when created (or, validating only, when it could be).
    pub error: i16,
    /// Why not, for the client.
    pub message: Option<String>,
    /// The partitions made.
    pub partitions: i32,
    /// The replicas of each.
    pub replication: i32,
}

impl TopicOutcome {
    /// A refusal with Kafka's `error` code and `message`.
    pub fn refused(error: i16, message: impl Into<String>) -> TopicOutcome {
        TopicOutcome {
            error,
            message: Some(message.into()),
            partitions: -1,
            replication: -1,
        }
    }
}

/// `wanted` with the broker's defaults applied (`default_partitions`, and as many replicas as
/// there are brokers, at most 3), or the refusal a Kafka broker would give: an illegal name,
/// fewer than 1 partition, or a replication factor below 1 or above `brokers`.
pub(super) fn settle(
    wanted: &WantedTopic,
    brokers: i32,
    default_partitions: i32,
) -> Result<(i32, i32), TopicOutcome> {
    if let Err(why) = check_name(&wanted.name) {
        return Err(TopicOutcome::refused(code::INVALID_TOPIC, why));
    }
    let partitions = match wanted.partitions {
        -1 => default_partitions,
        n => n,
    };
    if partitions < 1 {
        return Err(TopicOutcome::refused(
            code::INVALID_PARTITIONS,
            format!("Number of partitions must be larger than 0, found {partitions}."),
        ));
    }
    let replication = match wanted.replication {
        -1 => brokers.min(3),
        n => n,
    };
    if replication < 1 || replication > brokers {
        return Err(TopicOutcome::refused(
            code::INVALID_REPLICATION_FACTOR,
            format!(
                "Replication factor: {replication} must be between 1 and the number of \
                 brokers: {brokers}."
            ),
        ));
    }
    Ok((partitions, replication))
}

/// Kafka's rule for topic names: 1 to 249 of `[a-zA-Z0-9._-]`, neither `.` nor `..`.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(format!("Topic name \"{name}\" is illegal."));
    }
    if name.len() > 249 {
        return Err(format!(
            "Topic name is longer than 249 characters: {}.",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "Topic name \"{name}\" is illegal: it contains {c:?}, where only ASCII \
             alphanumerics, '.', '_' and '-' are allowed."
        ));
    }
    Ok(())
}

/// The CreateTopics response frame (size prefix included) answering `request` with
/// `outcomes`, one per topic in the request's order.
pub(super) fn create_topics_response(request: &CreateTopics, outcomes: &[TopicOutcome]) -> Vec<u8> {
    let topics = request
        .topics
        .iter()
        .zip(outcomes)
        .map(|(topic, outcome)| {
            CreatableTopicResult::default()
                .with_name(TopicName(StrBytes::from_string(topic.name.clone())))
                .with_error_code(outcome.error)
                .with_error_message(outcome.message.clone().map(StrBytes::from_string))
                .with_num_partitions(outcome.partitions)
                .with_replication_factor(outcome.replication as i16)
                .with_configs(if outcome.error == 0 {
                    Some(vec![])
                } else {
                    None
                })
        })
        .collect();
    let response = CreateTopicsResponse::default().with_topics(topics);
    let header = ResponseHeader::default().with_correlation_id(request.correlation_id);
    let mut out = BytesMut::new();
    out.extend_from_slice(&[0; 4]);
    let header_version = CreateTopicsResponse::header_version(request.version);
    // The version is one of CREATE_TOPICS_VERSIONS and every field fits it: encoding cannot
    // fail.
    header
        .encode(&mut out, header_version)
        .and_then(|()| response.encode(&mut out, request.version))
        .expect("a CreateTopics response of a supported version encodes");
    framed(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;
    use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
    use kafka_protocol::messages::BrokerId;

    /// An ApiVersions v1 response as librdkafka's mock cluster writes it: no error, Produce
    /// 0–10 and Metadata 0–12, throttle 0.
    const MOCK_API_VERSIONS_V1: &[u8] = &[
        0, 0, 0, 26, // size
        0, 0, 0, 7, // correlation id
        0, 0, // error code
        0, 0, 0, 2, // two api keys
        0, 0, 0, 0, 0, 10, // Produce 0–10
        0, 3, 0, 0, 0, 12, // Metadata 0–12
        0, 0, 0, 0, // throttle time
    ];

    #[test]
    fn frames_are_read_whole_and_a_cut_stream_ends() {
        let mut bytes: &[u8] = &[0, 0, 0, 2, 7, 8, 0, 0, 0, 0, 0, 0, 0, 3, 1];
        let mut frame = Vec::new();
        assert!(read_frame(&mut bytes, &mut frame).unwrap());
        assert_eq!(frame, [0, 0, 0, 2, 7, 8]);
        assert!(read_frame(&mut bytes, &mut frame).unwrap());
        assert_eq!(frame, [0, 0, 0, 0]);
        // Three bytes announced, one there: the stream ended within a frame.
        assert!(!read_frame(&mut bytes, &mut frame).unwrap());
        assert!(!read_frame(&mut &[][..], &mut frame).unwrap());
        let err = read_frame(&mut &[0xff, 0xff, 0xff, 0xfe][..], &mut frame).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_request_start_is_key_version_and_correlation_id() {
        let frame = [0, 0, 0, 10, 0, 19, 0, 4, 0, 0, 1, 2, 0xff, 0xff];
        assert_eq!(
            request_start(&frame),
            Some(RequestStart {
                api_key: 19,
                api_version: 4,
                correlation_id: 258
            })
        );
        assert_eq!(request_start(&frame[..11]), None);
        assert_eq!(response_correlation(&frame), Some(0x0013_0004));
    }

    #[test]
    fn create_topics_is_added_to_the_mocks_api_versions() {
        let out = add_create_topics(MOCK_API_VERSIONS_V1, 1).unwrap();
        let mut expected = MOCK_API_VERSIONS_V1.to_vec();
        expected[3] = 32; // six bytes more
        expected[13] = 3; // three api keys
        expected.splice(26..26, [0, 19, 0, 2, 0, 6]);
        assert_eq!(out, expected);
        // v0 has no throttle time.
        let v0 = [0, 0, 0, 10, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            add_create_topics(&v0, 0).unwrap(),
            [0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 19, 0, 2, 0, 6]
        );
    }

    #[test]
    fn flexible_api_versions_keep_header_v0_and_compact_arrays() {
        let mut frame = vec![0, 0, 0, 0];
        ResponseHeader::default()
            .with_correlation_id(5)
            .encode(&mut frame, 0)
            .unwrap();
        let response = ApiVersionsResponse::default().with_api_keys(vec![ApiVersion::default()
            .with_api_key(3)
            .with_min_version(0)
            .with_max_version(12)]);
        let mut body = BytesMut::new();
        response.encode(&mut body, 3).unwrap();
        frame.extend_from_slice(&body);
        let n = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&n.to_be_bytes());
        let out = add_create_topics(&frame, 3).unwrap();
        assert_eq!(
            out.len(),
            frame.len() + 7,
            "six bytes and an empty tag buffer"
        );
        let mut read = Bytes::copy_from_slice(&out[4..]);
        assert_eq!(
            ResponseHeader::decode(&mut read, 0).unwrap().correlation_id,
            5
        );
        let back = ApiVersionsResponse::decode(&mut read, 3).unwrap();
        assert_eq!(
            back.api_keys
                .iter()
                .map(|k| (k.api_key, k.min_version, k.max_version))
                .collect::<Vec<_>>(),
            [(3, 0, 12), (19, 2, 6)]
        );
    }

    #[test]
    fn error_responses_and_ones_with_create_topics_are_relayed_as_they_are() {
        // The mock's answer to a version it does not serve (35: UNSUPPORTED_VERSION).
        let mut refused = MOCK_API_VERSIONS_V1.to_vec();
        refused[9] = 35;
        assert_eq!(add_create_topics(&refused, 1), None);
        let mut listed = MOCK_API_VERSIONS_V1.to_vec();
        listed[21] = 19;
        assert_eq!(add_create_topics(&listed, 1), None);
        assert_eq!(add_create_topics(&MOCK_API_VERSIONS_V1[..20], 1), None);
    }

    #[test]
    fn the_controller_is_made_one_of_the_brokers() {
        use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
        let frame = |controller: i32, version: i16| {
            let broker = |id| {
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(id))
                    .with_host(StrBytes::from_static_str("127.0.0.1"))
                    .with_port(9092 + id)
            };
            let mut out = BytesMut::new();
            out.extend_from_slice(&[0; 4]);
            ResponseHeader::default()
                .with_correlation_id(11)
                .encode(&mut out, MetadataResponse::header_version(version))
                .unwrap();
            MetadataResponse::default()
                .with_brokers(vec![broker(2), broker(1), broker(3)])
                .with_controller_id(BrokerId(controller))
                .encode(&mut out, version)
                .unwrap();
            framed(out)
        };
        // What the mock says (controller 0), in the classic and the flexible encoding.
        for version in [1, 8, 9, 12] {
            assert_eq!(
                fix_controller(&frame(0, version), version),
                Some(frame(1, version))
            );
            assert_eq!(fix_controller(&frame(3, version), version), None);
        }
        // Version 0 names no controller.
        assert_eq!(fix_controller(&frame(0, 0), 0), None);
        // A v12 response as the mock writes it: broker 1, controller 0, no topics, and one
        // empty tag buffer more than the spec has (kept).
        let mut mock = vec![0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 10];
        mock.extend_from_slice(b"127.0.0.1");
        mock.extend_from_slice(&[0, 0, 135, 155, 0, 0, 4]);
        mock.extend_from_slice(b"abc");
        let controller = mock.len();
        mock.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0]);
        let n = (mock.len() - 4) as i32;
        mock[..4].copy_from_slice(&n.to_be_bytes());
        let mut fixed = mock.clone();
        fixed[controller + 3] = 1;
        assert_eq!(fix_controller(&mock, 12), Some(fixed));
    }

    /// A CreateTopics request frame as a client encodes it.
    fn request_frame(version: i16, request: &CreateTopicsRequest) -> Vec<u8> {
        let mut out = BytesMut::new();
        out.extend_from_slice(&[0; 4]);
        RequestHeader::default()
            .with_request_api_key(CREATE_TOPICS)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("test")))
            .encode(
                &mut out,
                ApiKey::CreateTopics.request_header_version(version),
            )
            .unwrap();
        request.encode(&mut out, version).unwrap();
        framed(out)
    }

    fn topic(name: &'static str, partitions: i32, replication: i16) -> CreatableTopic {
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(name)))
            .with_num_partitions(partitions)
            .with_replication_factor(replication)
    }

    #[test]
    fn create_topics_requests_decode_in_both_encodings() {
        let assigned = topic("c", -1, -1).with_assignments(vec![
            CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(vec![BrokerId(1), BrokerId(2)]),
            CreatableReplicaAssignment::default()
                .with_partition_index(1)
                .with_broker_ids(vec![BrokerId(2), BrokerId(1)]),
        ]);
        let request = CreateTopicsRequest::default()
            .with_topics(vec![topic("a", 8, 1), topic("b", -1, -1), assigned])
            .with_timeout_ms(5000)
            .with_validate_only(true);
        for version in CREATE_TOPICS_VERSIONS {
            let parsed = parse_create_topics(&request_frame(version, &request)).unwrap();
            assert_eq!(
                parsed,
                CreateTopics {
                    version,
                    correlation_id: 42,
                    topics: vec![
                        WantedTopic {
                            name: "a".into(),
                            partitions: 8,
                            replication: 1
                        },
                        WantedTopic {
                            name: "b".into(),
                            partitions: -1,
                            replication: -1
                        },
                        WantedTopic {
                            name: "c".into(),
                            partitions: 2,
                            replication: 2
                        },
                    ],
                    validate_only: true,
                }
            );
        }
        let err = parse_create_topics(&request_frame(7, &request)).unwrap_err();
        assert!(err.contains("CreateTopics version 7"), "{err}");
        let mut cut = request_frame(4, &request);
        cut.truncate(cut.len() - 6);
        let err = parse_create_topics(&cut).unwrap_err();
        assert!(err.contains("does not decode"), "{err}");
    }

    #[test]
    fn a_v4_response_is_classic_and_names_each_topic() {
        let request = CreateTopics {
            version: 4,
            correlation_id: 9,
            topics: vec![
                WantedTopic {
                    name: "a".into(),
                    partitions: 8,
                    replication: 1,
                },
                WantedTopic {
                    name: "b".into(),
                    partitions: 0,
                    replication: 1,
                },
            ],
            validate_only: false,
        };
        let outcomes = [
            TopicOutcome {
                error: 0,
                message: None,
                partitions: 8,
                replication: 1,
            },
            TopicOutcome::refused(code::INVALID_PARTITIONS, "no"),
        ];
        let frame = create_topics_response(&request, &outcomes);
        assert_eq!(
            frame,
            [
                0, 0, 0, 28, // size
                0, 0, 0, 9, // correlation id
                0, 0, 0, 0, // throttle time
                0, 0, 0, 2, // two topics
                0, 1, b'a', 0, 0, 0xff, 0xff, // "a", no error, no message
                0, 1, b'b', 0, 37, 0, 2, b'n', b'o', // "b", INVALID_PARTITIONS, "no"
            ]
        );
    }

    #[test]
    fn a_flexible_response_carries_the_counts_and_a_tagged_header() {
        let request = CreateTopics {
            version: 5,
            correlation_id: 3,
            topics: vec![WantedTopic {
                name: "a".into(),
                partitions: 8,
                replication: 1,
            }],
            validate_only: false,
        };
        let outcome = TopicOutcome {
            error: 0,
            message: None,
            partitions: 8,
            replication: 1,
        };
        let frame = create_topics_response(&request, &[outcome]);
        assert_eq!(response_correlation(&frame), Some(3));
        let mut read = Bytes::copy_from_slice(&frame[4..]);
        ResponseHeader::decode(&mut read, 1).unwrap();
        let back = CreateTopicsResponse::decode(&mut read, 5).unwrap();
        assert!(!read.has_remaining());
        let t = &back.topics[0];
        assert_eq!(
            (
                t.name.0.as_str(),
                t.error_code,
                t.num_partitions,
                t.replication_factor
            ),
            ("a", 0, 8, 1)
        );
    }

    #[test]
    fn topics_are_settled_as_a_broker_would() {
        let want = |name: &str, partitions, replication| WantedTopic {
            name: name.into(),
            partitions,
            replication,
        };
        assert_eq!(settle(&want("t", 8, 1), 1, 4), Ok((8, 1)));
        assert_eq!(settle(&want("t", -1, -1), 5, 4), Ok((4, 3)));
        assert_eq!(settle(&want("t", -1, -1), 2, 4), Ok((4, 2)));
        let refused = |w: WantedTopic, brokers| settle(&w, brokers, 4).unwrap_err().error;
        assert_eq!(refused(want("t", 0, 1), 1), code::INVALID_PARTITIONS);
        assert_eq!(refused(want("t", -5, 1), 1), code::INVALID_PARTITIONS);
        assert_eq!(
            refused(want("t", 1, 2), 1),
            code::INVALID_REPLICATION_FACTOR
        );
        assert_eq!(
            refused(want("t", 1, 0), 1),
            code::INVALID_REPLICATION_FACTOR
        );
        assert_eq!(refused(want("", 1, 1), 1), code::INVALID_TOPIC);
        assert_eq!(refused(want("..", 1, 1), 1), code::INVALID_TOPIC);
        assert_eq!(refused(want("a b", 1, 1), 1), code::INVALID_TOPIC);
        assert_eq!(
            refused(want(&"x".repeat(250), 1, 1), 1),
            code::INVALID_TOPIC
        );
        assert!(settle(&want("tidemark-j_v.1-state", 1, 1), 1, 4).is_ok());
    }
}
