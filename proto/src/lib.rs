//! Generated types and service stubs of Warden's gRPC API, package `warden.v1`
//! (see `proto/warden.proto` for the field-by-field documentation).

#![allow(clippy::all, missing_docs)]

/// `warden.v1`: messages, clients (`*_client`) and servers (`*_server`).
pub mod v1 {
    tonic::include_proto!("warden.v1");
}

/// Encoded `FileDescriptorSet` of `warden.proto`, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/warden_descriptor.bin"));

/// The raw text of `warden.proto`, for clients that generate their own stubs.
pub const PROTO_SOURCE: &str = include_str!("../warden.proto");
