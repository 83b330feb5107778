//! Compiles `warden.proto` with protox (a pure-Rust protobuf compiler), so no
//! system `protoc` is needed, and emits the file descriptor set that the
//! daemon serves through gRPC server reflection.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=warden.proto");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let fds = protox::compile(["warden.proto"], ["."])?;
    let bytes = prost::Message::encode_to_vec(&fds);
    std::fs::write(out.join("warden_descriptor.bin"), &bytes)?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
