//! The name of this process among the instances running one job (`docs/kafka.md`, "Instance
//! ids"): `--instance-id`, else the host name and the process id (`db7-41532`). It is the label
//! `tidemark_instance` on every series, the name in the clock-offset exchange, and the
//! `instance` of the report and of `/api/v1/job`.

/// The host name and the process id, `host-pid`: distinct for every process running at one
/// time on one host, and telling which host a series came from.
pub fn default_instance_id() -> String {
    format!("{}-{}", host_name(), std::process::id())
}

/// `--instance-id` when given, else [`default_instance_id`].
pub fn resolve(flag: Option<&str>) -> String {
    match flag {
        Some(id) => id.to_owned(),
        None => default_instance_id(),
    }
}

/// Checks an `--instance-id` value: a name that is not empty and has no control characters
/// (it becomes a label value and a field of Kafka control messages).
pub fn parse_instance_id(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("must not be empty (default: the host name and process id)".into());
    }
    if let Some(c) = s.chars().find(|c| c.is_control()) {
        return Err(format!("must not contain control characters (found {c:?})"));
    }
    Ok(s.to_owned())
}

/// The host name as the system gives it (`gethostname(2)`), else `localhost`.
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for `buf.len()` bytes; gethostname writes at most that many.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".to_owned();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..len]).trim().to_owned();
    if name.is_empty() {
        "localhost".to_owned()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_host_name_and_the_process_id() {
        let id = default_instance_id();
        let (host, pid) = id.rsplit_once('-').unwrap();
        assert_eq!(pid, std::process::id().to_string());
        assert!(!host.is_empty());
        // The same host name the system reports elsewhere.
        if let Ok(system) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
            assert_eq!(host, system.trim());
        }
        assert_eq!(resolve(None), id);
        assert_eq!(resolve(Some("a")), "a");
    }

    #[test]
    fn a_given_id_must_be_a_name() {
        assert_eq!(parse_instance_id("eu-1").unwrap(), "eu-1");
        assert!(parse_instance_id("  ")
            .unwrap_err()
            .contains("must not be empty"));
        assert!(parse_instance_id("a\nb")
            .unwrap_err()
            .contains("control characters"));
    }
}
