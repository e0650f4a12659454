// The authenticated store's host (distributed/store_server.hpp) stops with every thread joined - by stop() and by
// stop_all(), the process's exit handler - also while a connection is open, so that no thread of it runs during
// static destruction.
#include "distributed/store_server.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace accel::distributed::rdzv {
namespace {

using namespace std::chrono_literals;

// This process's threads (/proc/self/task).
int thread_count()
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    if (d == nullptr) return -1;
    while (dirent *e = readdir(d))
        if (e->d_name[0] != '.') ++n;
    closedir(d);
    return n;
}

int free_port()
{
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
    getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
    close(fd);
    return ntohs(a.sin_port);
}

// A client that connects and says nothing: the server's thread for it waits in the handshake.
int connect_idle(int port)
{
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// Waits (up to 5 s) until the process has `n` threads. The server's handshake deadline is 30 s, so a thread that
// stop() did not end would still be there.
bool threads_become(int n)
{
    for (auto end = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < end;
         std::this_thread::sleep_for(10ms))
        if (thread_count() == n) return true;
    return false;
}

void expect_closed(int fd)
{
    char c;
    EXPECT_EQ(recv(fd, &c, 1, 0), 0) << "the server did not close the connection";
    close(fd);
}

TEST(StoreServerStop, JoinsEveryThreadWithAConnectionOpen)
{
    const int before = thread_count();
    const int port = free_port();
    StoreServer server(port, "token", 30s); // a handshake deadline far beyond the test
    const int client = connect_idle(port);
    ASSERT_GE(client, 0);
    ASSERT_TRUE(threads_become(before + 2)) << thread_count() << " threads, expected the acceptor and one connection";
    const auto t0 = std::chrono::steady_clock::now();
    server.stop();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "stop() waited for the handshake's deadline";
    // (Polled: a joined thread leaves /proc/self/task a moment after its join returned.)
    EXPECT_TRUE(threads_become(before)) << thread_count() << " threads: one of the server outlived stop()";
    expect_closed(client);
    EXPECT_LT(connect_idle(port), 0) << "still listening after stop()";
    server.stop(); // idempotent, as the destructor calls it again
}

TEST(StoreServerStop, StopAllAsAtExit)
{
    const int before = thread_count();
    const int port = free_port();
    StoreServer server(port, "token", 30s);
    const int client = connect_idle(port);
    ASSERT_GE(client, 0);
    ASSERT_TRUE(threads_become(before + 2));
    StoreServer::stop_all();
    EXPECT_TRUE(threads_become(before)) << thread_count() << " threads: one of the server outlived stop_all()";
    expect_closed(client);
}

} // namespace
} // namespace accel::distributed::rdzv
