// A threaded key-value server on loopback, the threaded-server workload of
// bench/run.py (driven by kvclient.c): a thread per connection, each request
// read into a growing buffer, split into strings, looked up in a shared map
// under a lock and answered -- a handful of allocations a request from a few
// dozen call stacks, freed again at once or when a value is replaced, as in
// real servers.
//
//   kvserver PORTFILE
//
// Listens on 127.0.0.1 at a port of the kernel's choosing, written to
// PORTFILE (renamed into place once whole).  A line per request: "SET key
// value" -> "OK", "GET key" -> "VALUE value" or "NONE", "SHUTDOWN" -> no
// answer; the server stops accepting and exits 0 once its connections have
// closed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

const int SHARDS = 16;

struct Shard {
    std::mutex lock;
    std::unordered_map<std::string, std::string> items;
};

Shard shards[SHARDS];
std::atomic<bool> stopping{false};
int listener = -1;

Shard &shard_of(const std::string &key) { return shards[std::hash<std::string>()(key) % SHARDS]; }

std::vector<std::string> words_of(const std::string &line) {
    std::vector<std::string> words;
    size_t at = 0;
    while (at < line.size()) {
        size_t end = line.find(' ', at);
        if (end == std::string::npos)
            end = line.size();
        if (end > at)
            words.emplace_back(line, at, end - at);
        at = end + 1;
    }
    return words;
}

// The answer to one request line, appended to `out`; false: SHUTDOWN.
bool answer(const std::string &line, std::string &out) {
    std::vector<std::string> words = words_of(line);
    if (words.size() == 3 && words[0] == "SET") {
        Shard &s = shard_of(words[1]);
        std::lock_guard<std::mutex> held(s.lock);
        s.items[words[1]] = words[2];
        out += "OK\n";
    } else if (words.size() == 2 && words[0] == "GET") {
        std::string value;
        {
            Shard &s = shard_of(words[1]);
            std::lock_guard<std::mutex> held(s.lock);
            auto it = s.items.find(words[1]);
            if (it != s.items.end())
                value = it->second;
        }
        out += value.empty() ? std::string("NONE\n") : "VALUE " + value + "\n";
    } else if (words.size() == 1 && words[0] == "SHUTDOWN") {
        return false;
    } else {
        out += "ERROR\n";
    }
    return true;
}

bool send_all(int fd, const std::string &data) {
    for (size_t sent = 0; sent < data.size();) {
        ssize_t n = write(fd, data.data() + sent, data.size() - sent);
        if (n <= 0)
            return false;
        sent += (size_t)n;
    }
    return true;
}

void serve(int fd) {
    std::string pending;
    char chunk[16384];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n <= 0)
            break;
        pending.append(chunk, (size_t)n);
        std::string out;
        size_t at = 0, end;
        while ((end = pending.find('\n', at)) != std::string::npos) {
            std::string line = pending.substr(at, end - at);
            at = end + 1;
            if (!answer(line, out)) {
                stopping = true;
                shutdown(listener, SHUT_RDWR); // wakes the accepting thread
            }
        }
        pending.erase(0, at);
        if (!out.empty() && !send_all(fd, out))
            break;
    }
    close(fd);
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: kvserver PORTFILE\n");
        return 2;
    }
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listener < 0 || bind(listener, (sockaddr *)&addr, sizeof addr) != 0 || listen(listener, 64) != 0 ||
        getsockname(listener, (sockaddr *)&addr, &len) != 0) {
        perror("kvserver: listen");
        return 1;
    }
    std::string part = std::string(argv[1]) + ".part";
    FILE *f = fopen(part.c_str(), "w");
    if (!f || fprintf(f, "%d\n", ntohs(addr.sin_port)) < 0 || fclose(f) != 0 || rename(part.c_str(), argv[1]) != 0) {
        perror("kvserver: port file");
        return 1;
    }
    std::vector<std::thread> connections;
    while (!stopping) {
        int fd = accept(listener, nullptr, nullptr);
        if (fd < 0)
            break;
        connections.emplace_back(serve, fd);
    }
    for (auto &t : connections)
        t.join();
    close(listener);
    return 0;
}
