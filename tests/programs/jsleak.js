// A Node script whose native memory grows from JavaScript (#60): 4,000
// Buffers of 50,000-50,006 bytes, each made by handleRequest (its memory
// is malloc's, through node's ArrayBuffer allocator), kept; then it says
// "done" and waits for its stdin to close.
const kept = [];
function handleRequest(i) {
  kept.push(Buffer.allocUnsafeSlow(50000 + (i % 7)));
}
function serve(n) {
  for (let i = 0; i < n; i++) handleRequest(i);
}
for (let r = 0; r < 20; r++) serve(200);
console.log("done", kept.length);
process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
