//! The hand-kept declarations (src/bindings.rs) must match what bindgen makes of the headers today.
//! Skipped, with the reason printed, when bindgen is not installed (apt-get install bindgen).
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// Splits bindgen output into items: each `extern "C" { ... }` block, `pub const`, `pub type` line.
fn items(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with("/*") || t.starts_with("#!") {
            continue;
        }
        current.push_str(t);
        current.push(' ');
        if t == "}" || (t.ends_with(';') && !current.starts_with("extern")) {
            out.insert(current.trim().to_string());
            current.clear();
        }
    }
    out
}

#[test]
fn declarations_match_headers() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bindgen = std::env::var("ACCEL_BINDGEN").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "bindgen".into());
    if Command::new(&bindgen).arg("--version").output().is_err() {
        println!("SKIP declarations_match_headers: bindgen ({}) is not installed", bindgen);
        return;
    }
    let out = Command::new("sh").arg(here.join("generate.sh")).output().expect("run generate.sh");
    assert!(out.status.success(), "generate.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    let fresh = items(&String::from_utf8_lossy(&out.stdout));
    let kept = items(&std::fs::read_to_string(here.join("src/bindings.rs")).unwrap());
    let stale: Vec<_> = kept.difference(&fresh).collect();
    let new: Vec<_> = fresh.difference(&kept).collect();
    // Additions to the headers (new types, new enum values) are allowed; a changed or removed
    // declaration is not.
    if !new.is_empty() {
        println!("note: the headers declare {} item(s) not in src/bindings.rs (rerun generate.sh to add them)", new.len());
    }
    assert!(
        stale.is_empty(),
        "src/bindings.rs no longer matches the headers; rerun generate.sh.\nchanged or removed: {:#?}\nnow in the headers: {:#?}",
        stale,
        new
    );
}

#[test]
fn links_and_calls() {
    let abi = unsafe { accel_sys::accel_abi_version() };
    assert_eq!(abi as u32, accel_sys::ACCEL_ABI_VERSION);
}

/// Every exported function of the ABI (tests/abi/expected_symbols.txt) is declared here.
#[test]
fn symbols_cover_the_abi() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let abi = here.join("../../../tests/abi/expected_symbols.txt");
    let Ok(expected) = std::fs::read_to_string(&abi) else {
        println!("SKIP symbols_cover_the_abi: {} not found (crate outside the source tree)", abi.display());
        return;
    };
    let names = |text: &str| -> BTreeSet<String> {
        text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(String::from).collect()
    };
    let listed = names(&std::fs::read_to_string(here.join("symbols.txt")).unwrap());
    let missing: Vec<_> = names(&expected).difference(&listed).cloned().collect();
    assert!(missing.is_empty(), "add to symbols.txt and rerun generate.sh: {missing:#?}");
}
