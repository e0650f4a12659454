// What a connection to the authenticated rendezvous store sends (src/distributed/rdzv_wire.*; issue 40.4): the
// handshake's proof and then framed requests, from anyone who reaches the port. The input is read as the server
// reads a connection: a proof (checked against a fixed token, never accepted: the input cannot know the HMAC), then
// frames, each refused before allocation when its length is 0 or over kMaxFrame, and decoded as a request; the same
// bytes are also decoded as an answer (the client's side). Nothing may throw or crash; a decoded message encodes back
// to exactly the bytes it came from; a request decoded as valid has its numbers parseable (the server relies on it).
#include "distributed/rdzv_wire.hpp"
#include "fuzz_common.hpp"

#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel::distributed::rdzv;
    const std::string nonce(kNonceBytes, 'n'), token = "fuzz-token";
    const std::string input(reinterpret_cast<const char *>(data), size);
    if (check_proof(token, nonce, input.substr(0, kProofBytes))) accel::fuzz::finding("a forged proof was accepted");
    (void)nonce_of_hello(input.substr(0, kHelloBytes));
    size_t at = 0;
    while (size - at >= 4) {
        const uint32_t n = frame_length(data + at);
        at += 4;
        if (n == 0 || n > kMaxFrame || n > size - at) break; // refused, or the connection ends first
        std::string why;
        if (auto m = decode_request(data + at, n, &why)) {
            if (encode(*m).substr(4) != std::string(reinterpret_cast<const char *>(data + at), n))
                accel::fuzz::finding("a request does not encode back to its bytes");
            if (m->op == kGet && !parse_int(m->args.at(1))) accel::fuzz::finding("a get without its timeout");
            if (m->op == kAdd && !parse_int(m->args.at(1))) accel::fuzz::finding("an add without its amount");
            if (m->op == kWait && !parse_int(m->args.at(0))) accel::fuzz::finding("a wait without its timeout");
        } else if (why.empty()) {
            accel::fuzz::finding("a refused request without a reason");
        }
        why.clear();
        if (auto a = decode_answer(data + at, n, &why); !a && why.empty()) accel::fuzz::finding("a refused answer without a reason");
        at += n;
    }
    return 0;
}
