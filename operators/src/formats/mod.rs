//! Binary event formats: Avro and Protobuf, alone or in the Confluent wire format with the
//! schemas in a Schema Registry (`docs/formats.md` is the user guide).
//!
//! | module | holds |
//! |---|---|
//! | [`avro`] | Avro values ↔ events, schema resolution, the writer's checks |
//! | [`protobuf`] | Protobuf messages → events, `.proto` compiled at run time |
//! | [`registry`] | the Schema Registry client: schemas by id (cached), register, look up |
//! | [`wire`] | the Confluent wire format's header and Protobuf message indexes |
//! | [`container`] | Avro object container files, for the `file` source |
//!
//! A source makes one [`BinaryFormat`] per vertex from its settings ([`SchemaSettings`]),
//! which checks them when the job is built; each subtask reads through its own
//! [`BinaryDecoder`], which remembers the last schema it used so that a message costs no lock
//! and no look-up when the schema id does not change.

pub mod avro;
pub mod container;
pub mod protobuf;
pub mod registry;
pub mod wire;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apache_avro::Schema;
use prost_reflect::MessageDescriptor;
use serde::Deserialize;
use tidemark_runtime::Map;

pub use avro::{AvroReader, AvroWriter};
pub use registry::{Registry, RegistryConfig, RegistryError, SchemaKind};

/// The binary formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Binary {
    /// Avro binary values.
    Avro,
    /// Protobuf messages.
    Protobuf,
}

/// Where a source's schemas come from, as its settings say.
#[derive(Clone, Debug, Default)]
pub struct SchemaSettings {
    /// `schema_registry:`: messages in the wire format, schemas by id.
    pub registry: Option<RegistryConfig>,
    /// `schema: FILE` (`.avsc` or `.proto`): plain messages of that schema.
    pub schema: Option<PathBuf>,
    /// `reader_schema: FILE.avsc`: every Avro value resolved to this schema.
    pub reader_schema: Option<PathBuf>,
    /// `message: pkg.Name`: the Protobuf message of `schema`.
    pub message: Option<String>,
}

/// The setting a problem is about, and the problem.
pub type SettingError = (&'static str, String);

/// How one schema's messages are read.
#[derive(Debug)]
pub enum Reader {
    /// Avro values of one writer schema.
    Avro(AvroReader),
    /// Protobuf messages of one message type.
    Protobuf(MessageDescriptor),
}

impl Reader {
    fn read(&self, bytes: &[u8]) -> Result<Map, String> {
        match self {
            Reader::Avro(r) => r.read(bytes),
            Reader::Protobuf(m) => protobuf::read(m, bytes),
        }
    }
}

/// Why a message could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The message is bad (not in the wire format, an id the registry does not know, bytes
    /// that do not decode): the source's `on_error` decides.
    Malformed(String),
    /// The registry cannot be asked: the job fails.
    Fatal(String),
}

/// A source vertex's binary format: its schemas, shared by its subtasks.
#[derive(Debug)]
pub struct BinaryFormat {
    kind: Binary,
    registry: Option<Arc<Registry>>,
    reader_schema: Option<Arc<Schema>>,
    /// The Protobuf message named by `message:`.
    message: Option<String>,
    /// Without a registry: the one schema's reader.
    plain: Option<Arc<Reader>>,
    /// With a registry: the reader of each schema id seen (a schema that does not compile is
    /// kept as its error, so its messages are rejected without asking again).
    by_id: Mutex<HashMap<u32, Result<Arc<Reader>, String>>>,
}

fn read_file(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

impl BinaryFormat {
    /// Checks `settings` for `kind` and reads their schema files (relative paths against
    /// `job_dir`); registry calls give up after `timeout`. Errors name the setting.
    pub fn new(
        kind: Binary,
        settings: &SchemaSettings,
        job_dir: &Path,
        timeout: Duration,
    ) -> Result<BinaryFormat, SettingError> {
        let name = match kind {
            Binary::Avro => "avro",
            Binary::Protobuf => "protobuf",
        };
        let path = |p: &PathBuf| job_dir.join(p);
        if let Some(registry) = &settings.registry {
            registry.check().map_err(|e| ("schema_registry.url", e))?;
        }
        let reader_schema = match &settings.reader_schema {
            Some(_) if kind == Binary::Protobuf => {
                return Err((
                    "reader_schema",
                    "applies to Avro only (format: avro)".into(),
                ))
            }
            Some(p) => {
                let text = read_file(&path(p)).map_err(|e| ("reader_schema", e))?;
                let schema = avro::parse_schema(&text)
                    .map_err(|e| ("reader_schema", format!("{}: {e}", p.display())))?;
                // A reader schema must at least read its own values.
                AvroReader::new(schema.clone(), Some(Arc::new(schema.clone()))).map_err(|e| {
                    (
                        "reader_schema",
                        format!("{}: cannot be resolved against itself: {e}", p.display()),
                    )
                })?;
                Some(Arc::new(schema))
            }
            None => None,
        };
        let plain = match (&settings.registry, &settings.schema, kind) {
            (Some(_), Some(_), _) => {
                return Err((
                    "schema",
                    "give either schema_registry (messages in the Confluent wire format) or \
                     schema (plain messages), not both"
                        .into(),
                ))
            }
            (None, None, _) => {
                return Err((
                    "format",
                    format!(
                        "{name} needs a schema: schema_registry: {{url: …}} for messages \
                         in the Confluent wire format, or schema: FILE for plain messages"
                    ),
                ))
            }
            (Some(_), None, _) => None,
            (None, Some(p), Binary::Avro) => {
                let text = read_file(&path(p)).map_err(|e| ("schema", e))?;
                let schema = avro::parse_schema(&text)
                    .map_err(|e| ("schema", format!("{}: {e}", p.display())))?;
                let reader = AvroReader::new(schema, reader_schema.clone())
                    .map_err(|e| ("schema", format!("{}: {e}", p.display())))?;
                Some(Arc::new(Reader::Avro(reader)))
            }
            (None, Some(p), Binary::Protobuf) => {
                let message = settings.message.as_deref().ok_or((
                    "message",
                    "format: protobuf with schema: FILE.proto needs message: pkg.Name".to_owned(),
                ))?;
                let text = read_file(&path(p)).map_err(|e| ("schema", e))?;
                let file = p
                    .file_name()
                    .map_or("schema.proto".into(), |f| f.to_string_lossy().into_owned());
                let (pool, _) = protobuf::compile((&file, &text), &imports_beside(&path(p)))
                    .map_err(|e| ("schema", format!("{}: {e}", p.display())))?;
                let desc = protobuf::message(&pool, message).map_err(|e| ("message", e))?;
                Some(Arc::new(Reader::Protobuf(desc)))
            }
        };
        Ok(BinaryFormat {
            kind,
            registry: settings
                .registry
                .as_ref()
                .map(|r| Arc::new(Registry::new(r, timeout))),
            reader_schema,
            message: settings.message.clone(),
            plain,
            by_id: Mutex::new(HashMap::new()),
        })
    }

    /// The registry, if the messages are in the wire format.
    pub fn registry(&self) -> Option<&Arc<Registry>> {
        self.registry.as_ref()
    }

    /// A decoder for one subtask.
    pub fn decoder(self: &Arc<Self>) -> BinaryDecoder {
        BinaryDecoder {
            format: self.clone(),
            last: None,
        }
    }

    /// The reader of schema `id`, fetched and compiled once.
    fn reader(&self, id: u32) -> Result<Arc<Reader>, DecodeError> {
        if let Some(known) = self
            .by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
        {
            return known.clone().map_err(DecodeError::Malformed);
        }
        let registry = self.registry.as_ref().expect("a registry");
        let made = match registry.schema(id) {
            Ok(schema) => self.compile(id, &schema, registry),
            Err(RegistryError::NotFound { .. }) => Err(format!(
                "schema id {id} is not in the schema registry {}",
                registry.url()
            )),
            Err(e) => return Err(DecodeError::Fatal(e.to_string())),
        };
        let made = made.map(Arc::new);
        self.by_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, made.clone());
        made.map_err(DecodeError::Malformed)
    }

    fn compile(
        &self,
        id: u32,
        schema: &registry::RegisteredSchema,
        registry: &Registry,
    ) -> Result<Reader, String> {
        match (self.kind, schema.kind) {
            (Binary::Avro, SchemaKind::Avro) => {
                let writer = avro::parse_schema(&schema.schema)
                    .map_err(|e| format!("schema id {id} does not parse: {e}"))?;
                AvroReader::new(writer, self.reader_schema.clone())
                    .map(Reader::Avro)
                    .map_err(|e| format!("schema id {id}: {e}"))
            }
            (Binary::Protobuf, SchemaKind::Protobuf) => {
                let mut imports = HashMap::new();
                collect_references(registry, &schema.references, &mut imports)
                    .map_err(|e| format!("schema id {id}: {e}"))?;
                let (pool, file) =
                    protobuf::compile(("tidemark-registry-schema.proto", &schema.schema), &imports)
                        .map_err(|e| format!("schema id {id} does not compile: {e}"))?;
                match &self.message {
                    Some(name) => protobuf::message(&pool, name),
                    // The message index picks the message per message; the file's first
                    // stands for the whole schema here.
                    None => protobuf::message_at(&pool, &file, &[0]),
                }
                .map(Reader::Protobuf)
                .map_err(|e| format!("schema id {id}: {e}"))
            }
            (kind, found) => Err(format!(
                "schema id {id} is a {found:?} schema, not {kind:?}"
            )),
        }
    }
}

/// Fetches `references` (and theirs) into `imports`: import name → `.proto` text.
fn collect_references(
    registry: &Registry,
    references: &[registry::Reference],
    imports: &mut HashMap<String, String>,
) -> Result<(), String> {
    for r in references {
        if imports.contains_key(&r.name) {
            continue;
        }
        let schema = registry
            .version(&r.subject, r.version)
            .map_err(|e| format!("import {}: {e}", r.name))?;
        imports.insert(r.name.clone(), schema.schema.clone());
        collect_references(registry, &schema.references, imports)?;
    }
    Ok(())
}

/// The `.proto` files beside `path` (its folder), for its imports.
fn imports_beside(path: &Path) -> HashMap<String, String> {
    let mut imports = HashMap::new();
    if let Some(Ok(entries)) = path.parent().map(std::fs::read_dir) {
        for entry in entries.flatten() {
            let p = entry.path();
            if p.extension().is_some_and(|e| e == "proto") && p != path {
                if let (Some(name), Ok(text)) = (p.file_name(), std::fs::read_to_string(&p)) {
                    imports.insert(name.to_string_lossy().into_owned(), text);
                }
            }
        }
    }
    imports
}

/// One subtask's decoder of a [`BinaryFormat`].
#[derive(Debug)]
pub struct BinaryDecoder {
    format: Arc<BinaryFormat>,
    /// The schema of the last message: the next one with the same id takes it without a lock.
    last: Option<(u32, Arc<Reader>)>,
}

impl BinaryDecoder {
    /// The event in `bytes`.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<Map, DecodeError> {
        if let Some(plain) = &self.format.plain {
            return plain.read(bytes).map_err(|e| {
                DecodeError::Malformed(format!("value does not decode with the schema: {e}"))
            });
        }
        let (id, payload) = wire::split(bytes).map_err(DecodeError::Malformed)?;
        let reader = match &self.last {
            Some((last, reader)) if *last == id => reader.clone(),
            _ => {
                let reader = self.format.reader(id)?;
                self.last = Some((id, reader.clone()));
                reader
            }
        };
        let payload = match (&*reader, self.format.kind) {
            (Reader::Protobuf(_), Binary::Protobuf) if self.format.message.is_none() => {
                let (indexes, rest) = wire::message_indexes(payload)
                    .map_err(|e| DecodeError::Malformed(format!("schema id {id}: {e}")))?;
                if indexes != [0] {
                    return self.decode_nested(id, &indexes, rest);
                }
                rest
            }
            (Reader::Protobuf(_), _) => {
                wire::message_indexes(payload)
                    .map_err(|e| DecodeError::Malformed(format!("schema id {id}: {e}")))?
                    .1
            }
            _ => payload,
        };
        reader.read(payload).map_err(|e| {
            DecodeError::Malformed(format!("value does not decode with schema id {id}: {e}"))
        })
    }

    /// A Protobuf message other than the schema's first (message indexes other than `[0]`).
    fn decode_nested(
        &mut self,
        id: u32,
        indexes: &[usize],
        bytes: &[u8],
    ) -> Result<Map, DecodeError> {
        let Reader::Protobuf(first) = &*self.format.reader(id)? else {
            unreachable!("a Protobuf reader")
        };
        let desc = protobuf::message_at(first.parent_pool(), first.parent_file().name(), indexes)
            .map_err(|e| DecodeError::Malformed(format!("schema id {id}: {e}")))?;
        protobuf::read(&desc, bytes).map_err(|e| {
            DecodeError::Malformed(format!("value does not decode with schema id {id}: {e}"))
        })
    }
}
