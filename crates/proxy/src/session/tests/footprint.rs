//! What an idle client costs: its task, which must stay in a small allocation size class.

use super::Rig;

#[tokio::test]
async fn a_client_s_task_fits_the_640_byte_size_class() {
    // An idle client costs mostly its task: this future inside tokio's task cell, which adds 120 bytes
    // (header, scheduler, id, stage, the tracker's token, trailer) and rounds up to 128. At 528 bytes or
    // less the cell is 640 bytes, one of jemalloc's size classes; at 529 it is 768. The relay loop's
    // work between two waits is not async for this reason, the span is boxed when it is on, and what an
    // idle session keeps is counted in bytes (see docs/benchmarks.md, "W6").
    let rig = Rig::new(2, "").await;
    let size = rig.serve_size().await;
    assert!(size <= 528, "a client's task future is {size} bytes");
}
