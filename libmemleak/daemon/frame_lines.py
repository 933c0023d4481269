"""Frame tokens -> the lines a report writes for them, kept in the text
store once (a line id per frame token), and each stack key as a run of
line ids once all its frames are named.  A frame of a module is named by
the symbolizer; a frame no module holds -- JIT-compiled code -- from its
runtime's perf map (symbols/perfmap.py); a frame of our own library is
left out of reports."""

from libmemleak.daemon.header_parts import SELF_LIBRARY
from libmemleak.daemon.python_code import PyFrame, as_frame, is_eval_loop, kind_of, merged_order
from libmemleak.files.memlog import Frame, render_frames

NOT_THE_PROGRAMS = -1  # a frame left out of reports: our own hooks'


class FrameLines:
    def __init__(self, keys, texts, symbolizer, symbolize, kind_code, perf_map):
        """keys: the KeyTable; texts: the TextStore; symbolize: False to
        write module+offset (MEMLEAK_SYMBOLIZE=no); kind_code(key id): what
        a key's entries say of it; perf_map(): the process's PerfMap, made
        at the first frame that needs it."""
        self.keys, self.texts, self.symbolizer, self.symbolize = keys, texts, symbolizer, symbolize
        self.kind_code = kind_code
        self._make_perf_map, self._perf_map = perf_map, None
        self.token_lines = {}  # frame token -> line id (or NOT_THE_PROGRAMS)
        self.python_kinds = {}  # frame token -> "py"/"py-entry" (a Python frame) or "eval" (the loop's)

    def symbolize_keys(self, key_ids):
        """Store the frame lines of these keys in the text store.  Keys with
        a frame the symbol budget cut short (or a JIT frame not named yet)
        are not stored; they are returned as (key id, [line id or text of
        each frame]), for the current report only."""
        texts, tokens_of, partial = self.texts, self.keys.tokens, []
        known, line_of = self.token_lines.get, self.line_of
        for key_id in key_ids:
            tokens = tokens_of(key_id)
            items = [known(t) for t in tokens]  # line ids: ints
            complete = True
            if None in items:
                items = [line_of(t) if x is None else x for t, x in zip(tokens, items)]
                complete = not any(type(x) is str for x in items)
            if self.python_kinds and not self.python_kinds.keys().isdisjoint(tokens):
                kinds = [self.python_kinds.get(t) for t in tokens]
                if "py" in kinds or "py-entry" in kinds:
                    items = [items[i] for i in merged_order(kinds)]
            if NOT_THE_PROGRAMS in items:
                items = [x for x in items if x != NOT_THE_PROGRAMS]
            if complete:
                texts.set_key(key_id, items, self.kind_code(key_id))
            else:
                partial.append((key_id, items))
        return partial

    def line_of(self, token):
        """The line id of the frame lines of this frame token; their text if
        not to be kept (symbolization cut short, a JIT frame not named yet);
        NOT_THE_PROGRAMS for a frame of our own library (e.g. our dlopen
        hook)."""
        module, address, _ = self.keys.frames[token]
        if type(address) is PyFrame:
            return self.python_line(token, address)
        if module is None:
            return self.jit_line(token, address)
        if module.path.endswith("/" + SELF_LIBRARY):
            line_id = NOT_THE_PROGRAMS
        elif not self.symbolize:
            line_id = self.texts.add_line(render_frames([Frame(None, module.path, address - module.base)]))
        else:
            skipped = self.symbolizer.skipped
            frames = self.symbolizer.frames_for(module, address)
            if is_eval_loop(frames):
                self.python_kinds[token] = "eval"
            text = render_frames(frames)
            if self.symbolizer.skipped != skipped:
                return text
            line_id = self.texts.add_line(text)
        self.token_lines[token] = line_id
        return line_id

    def jit_line(self, token, address):
        """A frame no module holds: named from the perf map -- kept once
        named; while unnamed, its address, asked again at the next report
        (the runtime may have named it by then)."""
        if self._perf_map is None:
            self._perf_map = self._make_perf_map()
        found = self._perf_map.frame_at(address)
        if found is None:
            return render_frames([Frame(None, None, address)])
        line_id = self.token_lines[token] = self.texts.add_line(
            render_frames([Frame(found[0], self._perf_map.shown, found[1])]))
        return line_id

    def python_line(self, token, frame):
        """A Python frame: its function, "(python)" as its module, its
        file and line (docs/memlog.md)."""
        self.python_kinds[token] = kind_of(frame)
        line_id = self.token_lines[token] = self.texts.add_line(render_frames([as_frame(frame)]))
        return line_id
