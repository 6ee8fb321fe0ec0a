//! Generates the pod-resources v1 messages, client and server from
//! `proto/api.proto`. protox compiles the descriptor set in Rust, so no
//! `protoc` is needed on the build machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/api.proto");
    let fds = protox::compile(["api.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        // The server is what the tests' fake kubelet implements.
        .build_server(true)
        // Methods a fake leaves out answer Unimplemented, as an older kubelet does for `Get`.
        .generate_default_stubs(true)
        .compile_fds(fds)?;
    Ok(())
}
