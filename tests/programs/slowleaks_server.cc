// A multi-threaded C++ server in miniature for `libmemleak report`: worker
// threads serve requests among heavy churn (std::map and std::string
// traffic, an LRU cache that evicts), and three kinds of growth hide in it:
//   Session::open          leaks one Session per round (never deleted)  -> suspect
//   parse_error_path       a rare error path that forgets its buffer     -> suspect
//   KeyCache::remember     never evicts "admin:" keys; freed only by its
//                          static destructor at exit                     -> suspect (freed at exit)
// Not suspects: the std::map/string churn, the LRU cache once full.
#include <atomic>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

extern "C" {
#include "checkpoint.h"
}

#define ROUNDS 8
#define WORKERS 3

struct Session {
    char state[96];
    __attribute__((noinline)) static Session *open() { return new Session(); }
};

__attribute__((noinline)) char *parse_error_path(size_t n) { return new char[n]; }

struct KeyCache {
    std::vector<std::string *> admin;
    __attribute__((noinline)) void remember(int round)
    {
        admin.push_back(new std::string("admin:" + std::to_string(round) + std::string(40, 'k')));
    }
    ~KeyCache()
    {
        for (auto *s : admin)
            delete s;
    }
};
static KeyCache key_cache;

struct Lru {
    std::list<std::string> order;
    std::unordered_map<std::string, std::list<std::string>::iterator> index;
    void touch(const std::string &key)
    {
        auto it = index.find(key);
        if (it != index.end())
            order.erase(it->second);
        order.push_front(key);
        index[key] = order.begin();
        if (order.size() > 32) {
            index.erase(order.back());
            order.pop_back();
        }
    }
};

static std::mutex lock;
static std::atomic<bool> stop{false};

static void worker(int id)
{
    std::map<std::string, std::string> table;
    unsigned seed = 17 + id;
    while (!stop) {
        std::lock_guard<std::mutex> hold(lock);
        for (int i = 0; i < 50; i++) {
            seed = seed * 1103515245 + 12345;
            std::string key = "user:" + std::to_string((seed >> 8) % 200) + std::string(30, 'x');
            if ((seed >> 16) % 3)
                table[key] = std::string(64 + (seed >> 20) % 200, 'v');
            else
                table.erase(key);
        }
    }
}

static std::vector<Session *> sessions;  // reachable, never closed: the leak

int main()
{
    std::vector<std::thread> threads;
    for (int i = 0; i < WORKERS; i++)
        threads.emplace_back(worker, i);
    Lru lru;
    for (int round = 1; round <= ROUNDS; round++) {
        sessions.push_back(Session::open());
        if (round == 2 || round == 5 || round == 7)
            (void)parse_error_path(300);
        key_cache.remember(round);
        for (int i = 0; i < 20; i++)
            lru.touch("page:" + std::to_string(round * 20 + i) + std::string(30, 'p'));
        std::lock_guard<std::mutex> hold(lock);  // a quiet moment for the report
        checkpoint("round");
    }
    stop = true;
    for (auto &t : threads)
        t.join();
    return 0;
}
