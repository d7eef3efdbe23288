//! Test support: the tables `docs/sidecar.md` holds between
//! `<!-- NAME:begin -->` and `<!-- NAME:end -->` are generated from the
//! contract, and a test per table keeps them equal (`TOOLGATE_BLESS=1`
//! rewrites them).

use std::sync::Mutex;

/// Serializes blessing: each table's test rewrites the same file.
static SIDECAR_MD: Mutex<()> = Mutex::new(());

/// Asserts that `docs/sidecar.md` holds `table` between the `name`
/// markers, or writes it there under `TOOLGATE_BLESS`.
pub(crate) fn assert_generated(name: &str, table: &str) {
    let _one = SIDECAR_MD.lock().unwrap_or_else(|p| p.into_inner());
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/sidecar.md");
    let text = std::fs::read_to_string(path).unwrap();
    let begin = format!("<!-- {name}:begin -->\n");
    let end_marker = format!("<!-- {name}:end -->");
    let start = text.find(&begin).expect("begin marker") + begin.len();
    let end = text.find(&end_marker).expect("end marker");
    assert!(start <= end, "{name}: end marker before begin marker");
    if std::env::var_os("TOOLGATE_BLESS").is_some() {
        let blessed = format!("{}{table}{}", &text[..start], &text[end..]);
        std::fs::write(path, blessed).unwrap();
        return;
    }
    assert_eq!(
        &text[start..end],
        table,
        "docs/sidecar.md's {name} table is stale: run TOOLGATE_BLESS=1 cargo test -p toolgate-contract"
    );
}
