"""Address -> loaded module, as it was when a stack was recorded.  A module
that was unloaded (dlclose) keeps its entry, and another may later occupy
the same addresses, so the answer depends on the stack's map epoch."""

import bisect


class ModuleMap:
    def __init__(self, modules):
        self._modules = sorted(modules, key=lambda m: m.lo)
        self._los = [m.lo for m in self._modules]
        self._widest = max((m.hi - m.lo for m in self._modules), default=0)

    def find(self, address, epoch):
        i = bisect.bisect_right(self._los, address) - 1
        while i >= 0 and address - self._los[i] < self._widest:
            m = self._modules[i]
            if m.lo <= address < m.hi and m.valid_at(epoch):
                return m
            i -= 1
        return None

    def fixed(self, address):
        """(True, the module) when which module holds address cannot depend
        on when a stack was recorded: exactly one module, loaded or
        unloaded, ever covered it -- or none did (the module: None).
        (False, None) when several did."""
        i = bisect.bisect_right(self._los, address) - 1
        found = None
        while i >= 0 and address - self._los[i] < self._widest:
            m = self._modules[i]
            if m.lo <= address < m.hi:
                if found is not None:
                    return False, None
                found = m
            i -= 1
        return True, found
