//! "Did you mean …?": the closest accepted name to a typo, by edit distance
//! ([`strsim::osa_distance`]: Levenshtein with adjacent transpositions as one edit).

/// The candidate closest to `typo`, if it is close enough to be the likely intent: at most one
/// edit for short names, two for names of 5 or more characters, three from 9 (ignoring case).
pub fn did_you_mean<'a, I>(typo: &str, candidates: I) -> Option<String>
where
    I: IntoIterator<Item = &'a str>,
{
    let typo_lower = typo.to_lowercase();
    let limit = match typo.chars().count() {
        0..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    candidates
        .into_iter()
        .filter(|c| *c != typo)
        .map(|c| (strsim::osa_distance(&typo_lower, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.to_string())
}

/// `; did you mean "x"?` or nothing.
pub fn hint(suggestion: &Option<String>) -> String {
    match suggestion {
        Some(s) => format!("; did you mean \"{s}\"?"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        let fields = ["cost", "scale", "offset"];
        assert_eq!(did_you_mean("cots", fields), Some("cost".into()));
        assert_eq!(did_you_mean("ofset", fields), Some("offset".into()));
        assert_eq!(did_you_mean("banana", fields), None);
        assert_eq!(
            did_you_mean("paralelism", ["parallelism", "partition"]),
            Some("parallelism".into())
        );
        assert_eq!(did_you_mean("Rate", ["rate"]), Some("rate".into()));
    }
}
