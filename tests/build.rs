//! Generates the CRI runtime.v1 client and messages the containerd oracle
//! (src/cri) uses from `proto/cri-api.proto`. protox compiles the descriptor
//! set in Rust, so no `protoc` is needed on the build machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/cri-api.proto");
    let fds = protox::compile(["cri-api.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(fds)?;
    Ok(())
}
