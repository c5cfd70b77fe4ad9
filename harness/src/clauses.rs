//! The clause IDs of the spec (`harness/spec/clauses.md`, a copy of `spec/clauses.md`), embedded
//! so the report lists every one of them, whatever was run.

/// The clauses file, as embedded at build time.
pub const CLAUSES_MD: &str = include_str!("../spec/clauses.md");

/// One clause: its ID, its section heading and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clause {
    /// The stable ID, e.g. `DEM-2`.
    pub id: String,
    /// The `##` heading it stands under.
    pub section: String,
    /// The statement, on one line.
    pub text: String,
}

/// Every clause, in the file's order.
pub fn all() -> Vec<Clause> {
    let mut out: Vec<Clause> = Vec::new();
    let mut section = String::new();
    for line in CLAUSES_MD.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            section = h.trim().to_owned();
        } else if let Some(item) = line.strip_prefix("- ") {
            let (id, text) = item.split_once(' ').unwrap_or((item, ""));
            if is_id(id) {
                out.push(Clause {
                    id: id.to_owned(),
                    section: section.clone(),
                    text: text.trim().to_owned(),
                });
            }
        } else if let (Some(last), true) = (out.last_mut(), line.starts_with("  ")) {
            last.text.push(' ');
            last.text.push_str(line.trim());
        }
    }
    out
}

/// Whether `id` is a clause ID of the file.
pub fn exists(id: &str) -> bool {
    all().iter().any(|c| c.id == id)
}

fn is_id(s: &str) -> bool {
    let Some((head, num)) = s.rsplit_once('-') else {
        return s.starts_with("X-") && s.len() > 2;
    };
    (head.chars().all(|c| c.is_ascii_uppercase()) && num.chars().all(|c| c.is_ascii_digit()))
        || (head == "X" && num.chars().all(|c| c.is_ascii_uppercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_is_parsed() {
        let all = all();
        let ids: Vec<&str> = all.iter().map(|c| c.id.as_str()).collect();
        for id in [
            "LOCK-1", "CFG-4", "RUN-8", "DEM-3", "ORPH-3", "POOL-2", "X-WHO", "X-PGVER",
        ] {
            assert!(ids.contains(&id), "{id} missing from {ids:?}");
        }
        assert_eq!(ids.len(), 50, "{ids:?}");
        let dem2 = all.iter().find(|c| c.id == "DEM-2").unwrap();
        assert!(dem2.text.contains("within 2·T"));
        assert_eq!(dem2.section, "Demotion and overlap");
        let run7 = all.iter().find(|c| c.id == "RUN-7").unwrap();
        assert!(
            run7.text.ends_with("the server releases the lock."),
            "{}",
            run7.text
        );
    }
}
