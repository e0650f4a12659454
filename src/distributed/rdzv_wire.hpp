// The authenticated rendezvous store's wire (issue 40.4): the job's shared secret, the HMAC-SHA256 challenge
// that every connection answers before the store serves it, and the framed requests and answers after it.
// LibTorch's TCPStore has no authentication and its server cannot be extended, so with a token accel hosts a
// store of its own (store_server.hpp) and talks to it with auth_store.hpp's client; this file is what both
// sides share, without LibTorch (the fuzz target and the server use it alone).
//
// Handshake (every connection, before anything else):
//   client -> server  greeting: "ACCELRDZV1" + 32-byte client nonce
//   server -> client  hello:    "ACCELRDZV1" + 32-byte server nonce
//   client -> server  proof:    "ACCELRDZV1" + the client nonce + HMAC(token, "client" | ns | nc)
//   server -> client  verdict:  'Y' + HMAC(token, "server" | ns | nc)   or   'N' (then closed)
// The client speaks first, so that a program that is not accel's client (LibTorch's TCPStore client of a process
// without the token, a scanner) never reads the server's bytes as its own protocol: LibTorch 1.13's client read a
// hello as a length and aborted its process (std::bad_alloc on its callback thread). It is closed without a word.
// Both sides prove the token: a client never hands its job's keys to a program that merely listens on the port.
// Fresh nonces on both sides: a recorded exchange cannot be replayed. The token is never sent.
//
// Frames after it: a 4-byte big-endian length (at most kMaxFrame), then one byte (the operation, or in an answer
// 0 = ok / 1 = error) and its arguments, each a 4-byte big-endian length and its bytes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel::distributed::rdzv {

// The job's shared secret: ACCEL_RDZV_TOKEN, else the contents of the file ACCEL_RDZV_TOKEN_FILE names (one
// trailing newline dropped); nullopt when neither is set. INVALID_ARGUMENT for a file that cannot be read or
// a token that is empty.
std::optional<std::string> token_from_env();

constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr size_t kMagicBytes = 10; // "ACCELRDZV1"
constexpr size_t kHelloBytes = kMagicBytes + kNonceBytes;
constexpr size_t kProofBytes = kMagicBytes + kNonceBytes + kMacBytes;
// The largest frame either side reads: the store carries connection details, ids and heartbeats (bytes to a
// few kB); a larger length is a stranger's or a broken peer's, refused before anything is allocated.
constexpr uint32_t kMaxFrame = 16u << 20;
constexpr size_t kMaxArgs = 4096;

// `n` bytes from OpenSSL's generator.
std::string random_bytes(size_t n);

std::string hello(const std::string &server_nonce);
// The server nonce of a hello; nullopt when it is not one.
std::optional<std::string> nonce_of_hello(const std::string &bytes);
std::string proof(const std::string &token, const std::string &server_nonce, const std::string &client_nonce);
// The client nonce of a proof that proves `token` for `server_nonce`; nullopt otherwise (compared in constant time).
std::optional<std::string> check_proof(const std::string &token, const std::string &server_nonce, const std::string &bytes);
// The server's answer to a valid proof, and its check on the client's side.
std::string server_proof(const std::string &token, const std::string &server_nonce, const std::string &client_nonce);
bool check_server_proof(const std::string &token, const std::string &server_nonce, const std::string &client_nonce,
                        const std::string &mac);

enum Op : uint8_t {
    kOk = 0, // answers
    kError = 1,
    kSet = 2,        // key, value
    kGet = 3,        // key, timeout ms: waits for the key
    kAdd = 4,        // key, decimal amount -> decimal sum
    kCheck = 5,      // keys... -> "1" / "0"
    kWait = 6,       // timeout ms, keys...
    kCompareSet = 7, // key, expected, desired -> the value now
    kDeleteKey = 8,  // key -> "1" / "0"
    kNumKeys = 9,    // -> decimal count
};

struct Message {
    uint8_t op = kOk;
    std::vector<std::string> args;
};

// The frame of `m`, its length prefix included.
std::string encode(const Message &m);
// A frame's length from its 4-byte prefix.
uint32_t frame_length(const uint8_t prefix[4]);
// A request's body (after the length prefix): its operation known and its arguments as many as it takes, every
// number a decimal in range. nullopt with *why saying what is wrong otherwise.
std::optional<Message> decode_request(const uint8_t *data, size_t size, std::string *why);
// An answer's body: kOk or kError and its arguments.
std::optional<Message> decode_answer(const uint8_t *data, size_t size, std::string *why);
// A decimal int64 argument ("-12"); nullopt when it is not exactly one.
std::optional<int64_t> parse_int(const std::string &s);

// Blocking socket I/O with a deadline (poll); false on a closed connection, an error or the deadline
// (*timed_out says which). A deadline of time_point::max() waits for ever.
using Deadline = std::chrono::steady_clock::time_point;
bool send_all(int fd, const std::string &bytes, Deadline deadline, bool *timed_out);
bool recv_exact(int fd, std::string &out, size_t n, Deadline deadline, bool *timed_out);

// "10.0.0.5:40312" / "[::1]:40312" of a socket address (as accept() gives it: a peer that already closed its
// connection has no getpeername() any more).
std::string address_text(const void *sockaddr_storage_ptr);

} // namespace accel::distributed::rdzv
