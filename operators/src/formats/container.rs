//! Avro object container files (`.avro`): the schema in the file's header, then blocks of
//! values (any codec the crate reads: null, deflate). Each value must be a record; it becomes
//! one event.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use apache_avro::Reader;
use tidemark_runtime::Map;

use super::avro::EventMapper;

/// The events of one container file, in order.
pub struct ContainerEvents {
    reader: Reader<'static, BufReader<File>>,
    mapper: EventMapper,
    /// Values read so far.
    read: u64,
}

impl std::fmt::Debug for ContainerEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerEvents")
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

impl ContainerEvents {
    /// Opens `path` and reads its header.
    pub fn open(path: &Path) -> Result<ContainerEvents, String> {
        let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let reader = Reader::new(BufReader::new(file)).map_err(|e| {
            format!(
                "{} is not an Avro object container file: {e}",
                path.display()
            )
        })?;
        let mapper = EventMapper::new(reader.writer_schema())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(ContainerEvents {
            reader,
            mapper,
            read: 0,
        })
    }

    /// How many values have been read.
    pub fn read(&self) -> u64 {
        self.read
    }

    /// The next event; `None` at the end. A value that does not decode ends the file (the
    /// blocks after it cannot be found): the error names the value's 1-based number.
    pub fn next_event(&mut self) -> Option<Result<Map, String>> {
        let value = self.reader.next()?;
        self.read += 1;
        let n = self.read;
        Some(
            value
                .map_err(|e| e.to_string())
                .and_then(|v| self.mapper.event(v))
                .map_err(|e| format!("value {n}: {e}")),
        )
    }
}
