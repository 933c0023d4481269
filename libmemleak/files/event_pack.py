"""The event log's chunk packing (native/reporter/event_pack.c): a
chunk's records with addresses named by their distance back to the last
record of the same address, and the fields laid out as columns, before
zstd -- about a third of the hook's bytes after compression.  Unpacking
gives the hook's bytes back exactly, or refuses a chunk that is not one."""

import cffi

from libmemleak import reporter_library

ffi = cffi.FFI()
ffi.cdef("""
struct mlk_ev_packer;
struct mlk_ev_packer *mlk_ev_packer_new(void);
void mlk_ev_packer_free(struct mlk_ev_packer *);
uint64_t mlk_ev_pack_bound(uint64_t, uint32_t);
int64_t mlk_ev_pack(struct mlk_ev_packer *, const uint8_t *, const uint32_t *, uint32_t, uint8_t *, uint64_t);
int mlk_ev_unpack(struct mlk_ev_packer *, const uint8_t *, uint64_t, const uint32_t *, uint32_t, uint8_t *,
                  uint64_t);
""")


def lib():
    return reporter_library(ffi)


def packed_bound(raw_len, npages):
    """The most bytes a chunk of raw_len record bytes in npages pages packs to."""
    return lib().mlk_ev_pack_bound(raw_len, npages)


class Packer:
    """Packs and unpacks chunks; holds the 4 MB of tables both use."""

    def __init__(self):
        p = lib().mlk_ev_packer_new()
        if p == ffi.NULL:
            raise MemoryError
        self._p = ffi.gc(p, lib().mlk_ev_packer_free)

    def pack(self, pages):
        """pages: each page's record bytes; the packed chunk."""
        L = lib()
        raw = b"".join(pages)
        lens = ffi.new("uint32_t[]", [len(p) for p in pages] or [0])
        cap = L.mlk_ev_pack_bound(len(raw), len(pages))
        out = ffi.new("uint8_t[]", cap)
        n = L.mlk_ev_pack(self._p, raw, lens, len(pages), out, cap)
        if n < 0:
            raise ValueError("a chunk too big to pack")
        return ffi.buffer(out, n)[:]

    def unpack(self, packed, lens):
        """The records of pages of `lens` bytes each, or None if `packed`
        is not a packed chunk of them."""
        total = sum(lens)
        c_lens = ffi.new("uint32_t[]", list(lens) or [0])
        out = ffi.new("uint8_t[]", max(total, 1))
        if lib().mlk_ev_unpack(self._p, packed, len(packed), c_lens, len(lens), out, total) != 0:
            return None
        return ffi.buffer(out, total)[:]
