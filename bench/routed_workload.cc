// bench/callgrind.py's "tcmalloc-static" workload: allocation-heavy C++
// (maps of strings, vectors of vectors) in a program statically linked
// with tcmalloc, whose executable defines malloc and operator new itself:
// traced, every allocation goes through a routed entry point
// (native/hook/route/), so this measures routing's cost.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? std::atoi(argv[1]) : 20;
    size_t total = 0;
    for (int r = 0; r < rounds; r++) {
        std::map<int, std::string> m;
        for (int i = 0; i < 4000; i++)
            m[i * 7919 % 10007] = std::string(20 + i % 50, 'x');
        std::vector<std::vector<int>> v;
        for (int i = 0; i < 4000; i++)
            v.emplace_back(i % 100, i);
        total += m.size() + v.size();
    }
    std::printf("%zu\n", total);
    return 0;
}
