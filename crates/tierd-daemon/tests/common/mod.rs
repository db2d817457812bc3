//! What the daemon's fixture tests share: the captured 6.12 guest tree, and a private copy of
//! it for a test to change.

use std::path::PathBuf;
use std::process::Command;

/// The guest tree captured by `tierd-vm capture-fixtures` (crates/tierd-linux/tests/fixtures).
pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tierd-linux/tests/fixtures/guest-6.12")
}

/// A private copy of the guest tree at `<tempdir>/root` (symlinks kept as links), to change.
pub fn copy_fixture() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let ok = Command::new("cp")
        .arg("-a")
        .arg(fixture())
        .arg(d.path().join("root"))
        .status()
        .unwrap()
        .success();
    assert!(ok, "cp -a of the fixture");
    d
}
