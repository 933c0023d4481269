// Three leaks at three functions of a Rust program (#60), each through the
// standard library's allocation layer (Vec growth, Box, format!'s String):
// 10 x 8,192 bytes at leak_vec, 10 x 4,096 at leak_boxes, 10 x 16 at
// leak_strings.
#[inline(never)]
fn leak_vec(n: usize) -> Vec<u64> {
    let mut v = Vec::new();
    for i in 0..n {
        v.push(i as u64); // RawVec::grow_one... allocate
    }
    v
}

#[inline(never)]
fn leak_boxes() -> Box<[u8; 4096]> {
    Box::new([7u8; 4096])
}

#[inline(never)]
fn leak_strings(i: usize) -> String {
    format!("session-{:08}", i)
}

fn main() {
    let mut kept = Vec::new();
    for i in 0..10 {
        std::mem::forget(std::hint::black_box(leak_vec(1000)));
        std::mem::forget(std::hint::black_box(leak_boxes()));
        kept.push(leak_strings(i));
    }
    std::mem::forget(kept);
    println!("done");
}
