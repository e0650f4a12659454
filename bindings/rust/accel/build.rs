// Adds libaccel's directory (found by accel-sys, which `links = "accel"`) to the RPATH of this crate's tests
// and examples, so they run from the build tree without LD_LIBRARY_PATH.
fn main() {
    if let Ok(dirs) = std::env::var("DEP_ACCEL_LIB_DIRS") {
        for d in dirs.split(':').filter(|d| !d.is_empty()) {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", d);
        }
    }
}
