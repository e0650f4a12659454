// The values `accel launch --nnodes MIN:MAX` reads back from the launchers' store (launch_elastic.cpp): written
// by the host launcher, but read from the network - a stranger's where the store has no rendezvous token, or a
// broken peer's - so each is checked before it sizes a world or names a port. Kept apart from launch_elastic.cpp
// (which needs LibTorch) so that tests/fuzz/fuzz_elastic_values.cpp can run them alone.
#pragma once

#include <string>

namespace accel::cli {

// The decimal integer `value` of store key `key` in [min, max]; a DATA_LOSS accel::Error naming the key and
// (a printable prefix of) the value otherwise.
int store_int(const std::string &key, const std::string &value, int min, int max);

// A store text for a message (elastic/failed's reason): at most 300 bytes, every byte outside printable ASCII
// shown as '?', so that a peer's value cannot flood or garble this launcher's log.
std::string store_text(const std::string &value);

} // namespace accel::cli
