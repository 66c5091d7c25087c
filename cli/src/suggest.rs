//! "Did you mean …?": the closest accepted name to a typo, by edit distance.

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
        .map(|c| (levenshtein(&typo_lower, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.to_string())
}

/// Levenshtein distance, with an adjacent transposition counted as one edit.
pub fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Optimal string alignment distance over a full matrix (names are short).
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
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
    fn distances() {
        assert_eq!(levenshtein("cost", "cost"), 0);
        assert_eq!(levenshtein("cots", "cost"), 1);
        assert_eq!(levenshtein("rat", "rate"), 1);
        assert_eq!(levenshtein("", "abc"), 3);
    }

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
