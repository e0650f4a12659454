// Links libaccel. ACCEL_LIB_DIR (the build directory or an install libdir) is searched first and
// added to the RPATH of test and example binaries; otherwise pkg-config's -L paths, then the system's.
use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=ACCEL_LIB_DIR");
    let mut dirs: Vec<String> = Vec::new();
    if let Ok(dir) = env::var("ACCEL_LIB_DIR") {
        if !dir.is_empty() {
            dirs.push(dir);
        }
    }
    if dirs.is_empty() {
        if let Ok(out) = Command::new("pkg-config").args(["--libs-only-L", "accel"]).output() {
            if out.status.success() {
                for flag in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    if let Some(d) = flag.strip_prefix("-L") {
                        dirs.push(d.to_string());
                    }
                }
            }
        }
    }
    for d in &dirs {
        println!("cargo:rustc-link-search=native={}", d);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", d);
    }
    // Link arguments do not reach dependent crates; they read DEP_ACCEL_LIB_DIRS (`links = "accel"`) and add
    // the RPATH to their own test and example binaries (see accel/build.rs).
    println!("cargo:lib_dirs={}", dirs.join(":"));
    println!("cargo:rustc-link-lib=dylib=accel");
}
