// config/json: the strict JSON reader (every error names its JSON path) and JsonWriter.
#include "common/error.hpp"
#include "config/json.hpp"

#include <cjson/cJSON.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

using accel::Error;
using accel::config::JsonDocument;
using accel::config::JsonObject;
using accel::config::JsonWriter;

namespace {

// Runs `f` and returns the accel::Error it throws (fails the test if it throws nothing).
Error catch_error(const std::function<void()> &f)
{
    try {
        f();
    } catch (const Error &e) {
        return e;
    }
    ADD_FAILURE() << "expected an accel::Error";
    return Error(ACCEL_OK, "");
}

#define EXPECT_ERROR(stmt, code_, msg_)                                                                                \
    do {                                                                                                               \
        Error e_ = catch_error([&] { stmt; });                                                                         \
        EXPECT_EQ(e_.code(), code_) << e_.what();                                                                      \
        EXPECT_EQ(std::string(e_.what()), std::string(msg_));                                                          \
    } while (0)

#define EXPECT_ERROR_HAS(stmt, code_, part_)                                                                           \
    do {                                                                                                               \
        Error e_ = catch_error([&] { stmt; });                                                                         \
        EXPECT_EQ(e_.code(), code_) << e_.what();                                                                      \
        EXPECT_NE(std::string(e_.what()).find(part_), std::string::npos) << e_.what();                                 \
    } while (0)

} // namespace

// ---- JsonDocument --------------------------------------------------------------------------------

TEST(JsonDocument, ParsesObject)
{
    JsonDocument d("{\"a\": 1}", "config_json");
    ASSERT_NE(d.root(), nullptr);
    EXPECT_TRUE(cJSON_IsObject(d.root()));
}

TEST(JsonDocument, NullTextIsInvalidArgument)
{
    EXPECT_ERROR(JsonDocument(nullptr, "config_json"), ACCEL_ERR_INVALID_ARGUMENT, "config_json: must not be NULL");
}

TEST(JsonDocument, MalformedNamesBytePosition)
{
    // cJSON stops at the bad token: byte 7 is the 'x' after "a": .
    EXPECT_ERROR(JsonDocument("{\"a\": 1x}", "config_json"), ACCEL_ERR_INVALID_ARGUMENT,
                 "config_json: malformed JSON at byte 7 near 'x}'");
    EXPECT_ERROR(JsonDocument("{\"a\": tru}", "spec_json"), ACCEL_ERR_INVALID_ARGUMENT,
                 "spec_json: malformed JSON at byte 6 near 'tru}'");
}

TEST(JsonDocument, MalformedUnexpectedEnd)
{
    Error e = catch_error([] { JsonDocument("{\"a\": ", "config_json"); });
    EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("config_json: malformed JSON at byte"), std::string::npos) << e.what();
    Error empty = catch_error([] { JsonDocument("", "config_json"); });
    EXPECT_EQ(std::string(empty.what()), "config_json: malformed JSON at byte 0 (unexpected end)");
}

TEST(JsonDocument, NearTextIsAtMostTwentyBytes)
{
    Error e = catch_error([] { JsonDocument("[1, 2, @abcdefghijklmnopqrstuvwxyz]", "config_json"); });
    EXPECT_EQ(std::string(e.what()), "config_json: malformed JSON at byte 7 near '@abcdefghijklmnopqrs'");
}

TEST(JsonDocument, TrailingGarbageRejected)
{
    EXPECT_ERROR(JsonDocument("{} x", "config_json"), ACCEL_ERR_INVALID_ARGUMENT,
                 "config_json: malformed JSON at byte 3 near 'x'");
}

// ---- JsonObject -----------------------------------------------------------------------------------

TEST(JsonObject, RootMustBeObject)
{
    JsonDocument d("[1]", "config_json");
    EXPECT_ERROR(JsonObject(d.root(), ""), ACCEL_ERR_INVALID_ARGUMENT, "(root): expected a JSON object, got [1]");
}

TEST(JsonObject, NestedObjectMustBeObject)
{
    JsonDocument d("{\"a\": {\"b\": 3}}", "config_json");
    JsonObject root(d.root(), "");
    auto a = root.get_object("a");
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->path(), "a");
    EXPECT_ERROR(a->get_object("b"), ACCEL_ERR_INVALID_ARGUMENT, "a.b: expected a JSON object, got 3");
}

TEST(JsonObject, PathOf)
{
    JsonDocument d("{}", "config_json");
    JsonObject root(d.root(), "");
    EXPECT_EQ(root.path_of("x"), "x");
    JsonObject nested(d.root(), "layers[2]");
    EXPECT_EQ(nested.path_of("x"), "layers[2].x");
}

TEST(JsonObject, HasTreatsNullAsAbsent)
{
    JsonDocument d("{\"a\": null, \"b\": 0}", "config_json");
    JsonObject o(d.root(), "");
    EXPECT_FALSE(o.has("a"));
    EXPECT_TRUE(o.has("b"));
    EXPECT_FALSE(o.has("c"));
}

TEST(JsonObject, DefaultsWhenAbsentOrNull)
{
    JsonDocument d("{\"n\": null}", "config_json");
    JsonObject o(d.root(), "");
    EXPECT_TRUE(o.get_bool("n", true));
    EXPECT_EQ(o.get_int("missing_int", 7, 0, 10), 7);
    EXPECT_FALSE(o.get_optional_int("missing_opt", 0, 10).has_value());
    EXPECT_DOUBLE_EQ(o.get_double("missing_double", 0.25, 0.0, 1.0), 0.25);
    EXPECT_EQ(o.get_string("missing_str", "def"), "def");
    EXPECT_FALSE(o.get_optional_string("missing_ostr").has_value());
    EXPECT_EQ(o.get_enum("missing_enum", "x", {"x", "y"}), "x");
    EXPECT_TRUE(o.get_int_array("missing_ia", 0, 1).empty());
    EXPECT_TRUE(o.get_double_array("missing_da", 0, 1).empty());
    EXPECT_EQ(o.get_string_array("missing_sa", {"q"}), std::vector<std::string>{"q"});
    EXPECT_FALSE(o.get_object("missing_obj").has_value());
    EXPECT_TRUE(o.get_object_array("missing_oa").empty());
    o.finish(); // "n" was looked up
}

TEST(JsonObject, ReadsValues)
{
    JsonDocument d("{\"b\": false, \"i\": 42, \"d\": 0.5, \"s\": \"hi\", \"e\": \"y\", \"ia\": [1, 2, 3],"
                   " \"da\": [0.5, 1], \"sa\": [\"a\", \"b\"], \"o\": {\"k\": 1}, \"oa\": [{}, {\"z\": 2}]}",
                   "config_json");
    JsonObject o(d.root(), "");
    EXPECT_FALSE(o.get_bool("b", true));
    EXPECT_EQ(o.get_int("i", 0, 0, 100), 42);
    EXPECT_DOUBLE_EQ(o.get_double("d", 0.0, 0.0, 1.0), 0.5);
    EXPECT_EQ(o.get_string("s", ""), "hi");
    EXPECT_EQ(o.get_enum("e", "x", {"x", "y"}), "y");
    EXPECT_EQ(o.get_int_array("ia", 0, 10), (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(o.get_double_array("da", 0, 1), (std::vector<double>{0.5, 1.0}));
    EXPECT_EQ(o.get_string_array("sa", {}), (std::vector<std::string>{"a", "b"}));
    auto obj = o.get_object("o");
    ASSERT_TRUE(obj);
    EXPECT_EQ(obj->get_int("k", 0, 0, 5), 1);
    obj->finish();
    auto arr = o.get_object_array("oa");
    ASSERT_EQ(arr.size(), 2u);
    EXPECT_EQ(arr[0].path(), "oa[0]");
    EXPECT_EQ(arr[1].path(), "oa[1]");
    EXPECT_EQ(arr[1].get_int("z", 0, 0, 5), 2);
    o.finish();
}

TEST(JsonObject, WrongTypesNameNestedPath)
{
    JsonDocument d("{\"a\": {\"b\": {\"flag\": 1, \"n\": \"3\", \"x\": true, \"s\": 5, \"e\": 1}}}", "config_json");
    JsonObject root(d.root(), "");
    auto a = root.get_object("a");
    auto b = a->get_object("b");
    EXPECT_EQ(b->path(), "a.b");
    EXPECT_ERROR(b->get_bool("flag", false), ACCEL_ERR_INVALID_ARGUMENT, "a.b.flag: expected true or false, got 1");
    EXPECT_ERROR(b->get_int("n", 0, 0, 10), ACCEL_ERR_INVALID_ARGUMENT, "a.b.n: expected an integer in 0..10, got \"3\"");
    EXPECT_ERROR(b->get_double("x", 0, 0, 1), ACCEL_ERR_INVALID_ARGUMENT, "a.b.x: expected a number, got true");
    EXPECT_ERROR(b->get_string("s", ""), ACCEL_ERR_INVALID_ARGUMENT, "a.b.s: expected a string, got 5");
    EXPECT_ERROR(b->get_enum("e", "p", {"p", "q"}), ACCEL_ERR_INVALID_ARGUMENT,
                 "a.b.e: expected one of \"p\", \"q\", got 1");
}

TEST(JsonObject, IntRanges)
{
    JsonDocument d("{\"low\": 0, \"high\": 11, \"frac\": 1.5, \"big\": 1e300, \"neg\": -1, \"ok\": 10}", "config_json");
    JsonObject o(d.root(), "cfg");
    EXPECT_ERROR(o.get_int("low", 1, 1, 10), ACCEL_ERR_INVALID_ARGUMENT, "cfg.low: expected an integer in 1..10, got 0");
    EXPECT_ERROR(o.get_int("high", 1, 1, 10), ACCEL_ERR_INVALID_ARGUMENT,
                 "cfg.high: expected an integer in 1..10, got 11");
    EXPECT_ERROR(o.get_int("frac", 1, 1, 10), ACCEL_ERR_INVALID_ARGUMENT,
                 "cfg.frac: expected an integer in 1..10, got 1.5");
    EXPECT_ERROR(o.get_optional_int("big", 0, INT64_MAX), ACCEL_ERR_INVALID_ARGUMENT,
                 "cfg.big: expected an integer >= 0, got 1e+300");
    EXPECT_ERROR(o.get_optional_int("neg", 0, INT64_MAX), ACCEL_ERR_INVALID_ARGUMENT,
                 "cfg.neg: expected an integer >= 0, got -1");
    EXPECT_EQ(o.get_int("ok", 1, 1, 10), 10);
}

TEST(JsonObject, DoubleRanges)
{
    JsonDocument d("{\"zero\": 0, \"neg\": -0.5, \"over\": 2, \"ok\": 1}", "config_json");
    JsonObject o(d.root(), "");
    EXPECT_ERROR(o.get_double("zero", 1, 0.0, INFINITY, true), ACCEL_ERR_INVALID_ARGUMENT,
                 "zero: expected a number > 0, got 0");
    EXPECT_ERROR(o.get_double("neg", 1, 0.0, 1.0), ACCEL_ERR_INVALID_ARGUMENT,
                 "neg: expected a number >= 0 and <= 1, got -0.5");
    EXPECT_ERROR(o.get_double("over", 1, 0.0, 1.0), ACCEL_ERR_INVALID_ARGUMENT,
                 "over: expected a number >= 0 and <= 1, got 2");
    EXPECT_DOUBLE_EQ(o.get_double("ok", 0, 0.0, 1.0), 1.0);
    EXPECT_DOUBLE_EQ(o.get_double("zero", 1, 0.0, 1.0), 0.0); // inclusive minimum accepts 0
}

TEST(JsonObject, ArrayElementErrorsNameIndex)
{
    JsonDocument d("{\"layers\": [{}, {}, {\"x\": [1, 2, -3]}], \"ia\": 4, \"da\": [0.1, \"a\"], \"sa\": [\"a\", 2],"
                   " \"oa\": [{}, 3], \"notarr\": {}}",
                   "config_json");
    JsonObject root(d.root(), "");
    auto layers = root.get_object_array("layers");
    ASSERT_EQ(layers.size(), 3u);
    EXPECT_ERROR(layers[2].get_int_array("x", 0, 10), ACCEL_ERR_INVALID_ARGUMENT,
                 "layers[2].x[2]: expected an integer in 0..10, got -3");
    EXPECT_ERROR(layers[2].get_int("x", 0, 0, 10), ACCEL_ERR_INVALID_ARGUMENT,
                 "layers[2].x: expected an integer in 0..10, got [1,2,-3]");
    EXPECT_ERROR(root.get_int_array("ia", 0, 10), ACCEL_ERR_INVALID_ARGUMENT, "ia: expected an array of integers, got 4");
    EXPECT_ERROR(root.get_double_array("da", 0, 1), ACCEL_ERR_INVALID_ARGUMENT, "da[1]: expected a number in [0, 1], got \"a\"");
    EXPECT_ERROR(root.get_string_array("sa", {}), ACCEL_ERR_INVALID_ARGUMENT, "sa[1]: expected a string, got 2");
    EXPECT_ERROR(root.get_object_array("oa"), ACCEL_ERR_INVALID_ARGUMENT, "oa[1]: expected a JSON object, got 3");
    EXPECT_ERROR(root.get_object_array("notarr"), ACCEL_ERR_INVALID_ARGUMENT,
                 "notarr: expected an array of objects, got {}");
}

TEST(JsonObject, UnknownKeyNamesPathAndKnownKeys)
{
    JsonDocument d("{\"a\": {\"x\": 1, \"typo\": 2}, \"b\": 1}", "config_json");
    JsonObject root(d.root(), "");
    auto a = root.get_object("a");
    a->get_int("x", 0, 0, 5);
    a->get_bool("y", false);
    EXPECT_ERROR(a->finish(), ACCEL_ERR_INVALID_ARGUMENT, "a.typo: unknown key (known keys: x, y)");
    EXPECT_ERROR(root.finish(), ACCEL_ERR_INVALID_ARGUMENT, "b: unknown key (known keys: a)");
}

TEST(JsonObject, UnknownKeyInArrayElement)
{
    JsonDocument d("{\"layers\": [{\"t\": 1}, {\"t\": 1}, {\"t\": 1, \"bogus\": 0}]}", "config_json");
    JsonObject root(d.root(), "");
    auto layers = root.get_object_array("layers");
    for (auto &l : layers) l.get_int("t", 0, 0, 5);
    layers[0].finish();
    EXPECT_ERROR(layers[2].finish(), ACCEL_ERR_INVALID_ARGUMENT, "layers[2].bogus: unknown key (known keys: t)");
}

TEST(JsonObject, DuplicateKey)
{
    JsonDocument d("{\"a\": {\"k\": 1, \"k\": 2}, \"a\": 3}", "config_json");
    JsonObject root(d.root(), "");
    auto a = root.get_object("a"); // the first "a"
    a->get_int("k", 0, 0, 5);
    EXPECT_ERROR(a->finish(), ACCEL_ERR_INVALID_ARGUMENT, "a.k: duplicate key");
    EXPECT_ERROR(root.finish(), ACCEL_ERR_INVALID_ARGUMENT, "a: duplicate key");
}

TEST(JsonObject, RequireAbsent)
{
    JsonDocument d("{\"p\": null, \"q\": {\"z\": 1}}", "config_json");
    JsonObject o(d.root(), "root");
    o.require_absent("p", "P is missing");
    o.require_absent("r", "R is missing");
    EXPECT_ERROR(o.require_absent("q", "Q is missing"), ACCEL_ERR_UNIMPLEMENTED,
                 "root.q: Q is missing (got {\"z\":1}; only null is accepted)");
    o.finish();
}

TEST(JsonObject, TypeErrorTruncatesLongValues)
{
    std::string long_str(100, 'a');
    JsonDocument d(("{\"s\": \"" + long_str + "\"}").c_str(), "config_json");
    JsonObject o(d.root(), "");
    Error e = catch_error([&] { o.get_int("s", 0, 0, 1); });
    std::string want = "s: expected an integer in 0..1, got \"" + std::string(56, 'a') + "...";
    EXPECT_EQ(std::string(e.what()), want);
}

TEST(JsonDescribe, Values)
{
    EXPECT_EQ(accel::config::describe(nullptr), "nothing");
    JsonDocument d("{\"a\": [1, \"x\", null, true]}", "config_json");
    EXPECT_EQ(accel::config::describe(d.root()), "{\"a\":[1,\"x\",null,true]}");
}

// ---- JsonWriter -----------------------------------------------------------------------------------

TEST(JsonWriter, EmptyObject)
{
    JsonWriter w;
    EXPECT_EQ(w.str(), "{}");
}

TEST(JsonWriter, AllValueKinds)
{
    JsonWriter w;
    w.add("t", true)
        .add("f", false)
        .add("i", int64_t{42})
        .add("neg", int64_t{-7})
        .add("d", 0.5)
        .add("s", std::string("he said \"hi\""))
        .add("c", "text")
        .add_null("n")
        .add("arr", std::vector<std::string>{"a", "b"})
        .add("empty", std::vector<std::string>{});
    EXPECT_EQ(w.str(), "{\"t\":true,\"f\":false,\"i\":42,\"neg\":-7,\"d\":0.5,\"s\":\"he said \\\"hi\\\"\",\"c\":"
                       "\"text\",\"n\":null,\"arr\":[\"a\",\"b\"],\"empty\":[]}");
}

TEST(JsonWriter, NestedObjects)
{
    JsonWriter w;
    w.add("a", int64_t{1})
        .begin_object("o")
        .add("x", true)
        .begin_object("inner")
        .add("y", "z")
        .end_object()
        .end_object()
        .add("b", int64_t{2});
    EXPECT_EQ(w.str(), "{\"a\":1,\"o\":{\"x\":true,\"inner\":{\"y\":\"z\"}},\"b\":2}");
}

TEST(JsonWriter, EndObjectAtRootIsNoOp)
{
    JsonWriter w;
    w.end_object().add("a", int64_t{1}).end_object();
    EXPECT_EQ(w.str(), "{\"a\":1}");
}

TEST(JsonWriter, OutputParsesBackThroughReader)
{
    JsonWriter w;
    w.add("n", int64_t{123456789}).begin_object("o").add("d", 0.125).end_object();
    std::string text = w.str();
    JsonDocument d(text.c_str(), "config_json");
    JsonObject root(d.root(), "");
    EXPECT_EQ(root.get_int("n", 0, 0, INT64_MAX), 123456789);
    auto o = root.get_object("o");
    EXPECT_DOUBLE_EQ(o->get_double("d", 0, 0, 1), 0.125);
    o->finish();
    root.finish();
}
