#include "traincache/train/checkpoint.h"

#include <fstream>
#include <iterator>
#include <string>

#include "catch.h"
#include "test_util.h"

using namespace traincache;

namespace {

// Two parameters trained for a few AdamW steps, so that the optimiser holds moments and a step count.
struct State {
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> opt;

  explicit State(uint64_t seed, int steps) {
    torch::manual_seed(seed);
    params = {torch::randn({3, 4}).requires_grad_(true), torch::randn({4}).requires_grad_(true)};
    opt = std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(0.1));
    for (int s = 0; s < steps; ++s) {
      opt->zero_grad();
      (params[0].matmul(params[1]).pow(2).sum()).backward();
      opt->step();
    }
  }

  // One more step from the current state: what the parameters become.
  std::vector<torch::Tensor> next_step() {
    opt->zero_grad();
    (params[0].matmul(params[1]).pow(2).sum()).backward();
    opt->step();
    return {params[0].detach().clone(), params[1].detach().clone()};
  }
};

const std::string kConfig = R"({"lr":0.1,"optimizer":"adamw","seed":7})";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void spit(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

}  // namespace

CATCH_TEST_CASE("checkpoint: a round trip restores step, parameters, optimiser state and generator", "[checkpoint]") {
  State a(1, 3);
  torch::manual_seed(99);
  auto rng = train::rng_state();
  train::save_checkpoint("ck.pt", 3, {a.params, *a.opt}, kConfig, rng.unsqueeze(0));
  double draw_a = torch::rand({1}).item<double>();

  State b(2, 0);  // other parameters, an empty optimiser, another generator state
  CATCH_REQUIRE(!b.params[0].equal(a.params[0]));
  torch::manual_seed(5);
  CATCH_CHECK(train::load_checkpoint("ck.pt", {b.params, *b.opt}, kConfig, 0, 1) == 3);
  CATCH_CHECK(b.params[0].equal(a.params[0]));
  CATCH_CHECK(b.params[1].equal(a.params[1]));
  CATCH_CHECK(torch::rand({1}).item<double>() == draw_a);  // the generator continues where it was saved

  // The optimiser's moments came along: the next step is the same bit for bit.
  auto after_a = a.next_step();
  auto after_b = b.next_step();
  CATCH_CHECK(after_b[0].equal(after_a[0]));
  CATCH_CHECK(after_b[1].equal(after_a[1]));
}

CATCH_TEST_CASE("checkpoint: each rank takes its own generator state", "[checkpoint]") {
  State a(1, 1);
  torch::manual_seed(11);
  auto r0 = train::rng_state();
  torch::manual_seed(12);
  auto r1 = train::rng_state();
  train::save_checkpoint("ranks.pt", 8, {a.params, *a.opt}, kConfig, torch::stack({r0, r1}));

  State b(2, 0);
  CATCH_CHECK(train::load_checkpoint("ranks.pt", {b.params, *b.opt}, kConfig, 1, 2) == 8);
  CATCH_CHECK(train::rng_state().equal(r1));
  CATCH_CHECK(train::load_checkpoint("ranks.pt", {b.params, *b.opt}, kConfig, 0, 2) == 8);
  CATCH_CHECK(train::rng_state().equal(r0));
  CATCH_CHECK(test::message_of([&] {
                train::load_checkpoint("ranks.pt", {b.params, *b.opt}, kConfig, 0, 3);
              }) == "ranks.pt: checkpoint was written by 2 process(es); resume it with WORLD_SIZE=2 (this run has 3)");
  CATCH_CHECK(test::code_of([&] {
                train::load_checkpoint("ranks.pt", {b.params, *b.opt}, kConfig, 0, 3);
              }) == Exit::usage);
}

CATCH_TEST_CASE("checkpoint: other settings, other shapes and damaged bytes are refused, nothing changed",
                "[checkpoint]") {
  State a(1, 2);
  train::save_checkpoint("ck.pt", 2, {a.params, *a.opt}, kConfig, train::rng_state().unsqueeze(0));
  State b(2, 0);
  auto before = b.params[0].detach().clone();

  std::string other = R"({"lr":0.2,"optimizer":"sgd","seed":7})";
  CATCH_CHECK(test::message_of([&] {
                train::load_checkpoint("ck.pt", {b.params, *b.opt}, other, 0, 1);
              }) == "ck.pt: checkpoint was written with other settings (changed: lr, optimizer)");

  std::vector<torch::Tensor> wrong = {torch::zeros({4, 3}), torch::zeros({4})};
  torch::optim::SGD sgd(wrong, torch::optim::SGDOptions(0.1));
  CATCH_CHECK(test::message_of([&] {
                train::load_checkpoint("ck.pt", {wrong, sgd}, kConfig, 0, 1);
              }) == "ck.pt: parameter shapes differ");

  // A payload that no longer matches its digest (the outer archive itself intact).
  {
    torch::serialize::InputArchive in;
    in.load_from("ck.pt");
    c10::IValue format, digest;
    torch::Tensor payload;
    in.read("format", format);
    in.read("payload", payload);
    in.read("payload_xxh3", digest);
    payload = payload.clone();
    payload[payload.size(0) / 2].bitwise_xor_(1);
    torch::serialize::OutputArchive out;
    out.write("format", format);
    out.write("payload", payload);
    out.write("payload_xxh3", digest);
    out.save_to("tampered.pt");
  }
  CATCH_CHECK(test::message_of([&] {
                train::load_checkpoint("tampered.pt", {b.params, *b.opt}, kConfig, 0, 1);
              }) == "tampered.pt: checkpoint damaged: its contents do not match their digest");
  CATCH_CHECK(test::code_of([&] {
                train::load_checkpoint("tampered.pt", {b.params, *b.opt}, kConfig, 0, 1);
              }) == Exit::data);

  // A flipped byte in the file: refused by the archive's own checks or by the digest.
  std::string damaged = slurp("ck.pt");
  damaged[damaged.size() / 2] ^= 0x01;
  spit("damaged.pt", damaged);
  CATCH_CHECK(test::code_of([&] {
                train::load_checkpoint("damaged.pt", {b.params, *b.opt}, kConfig, 0, 1);
              }) == Exit::data);

  spit("foreign.pt", "not a checkpoint at all");
  CATCH_CHECK(test::message_of([&] {
                train::load_checkpoint("foreign.pt", {b.params, *b.opt}, kConfig, 0, 1);
              }) == "foreign.pt: unreadable checkpoint (damaged, or written by an older gc-train)");
  CATCH_CHECK(b.params[0].equal(before));  // every refusal left the parameters alone
}

CATCH_TEST_CASE("checkpoint: config_diff names the top-level settings that differ", "[checkpoint]") {
  CATCH_CHECK(train::checkpoint_config_diff(R"({"a":1,"b":2})", R"({"a":1,"b":3,"c":0})") == "b, c");
  CATCH_CHECK(train::checkpoint_config_diff(R"({"a":1})", R"({"a":1})") == "unknown");
  CATCH_CHECK(train::checkpoint_config_diff("not json", R"({"a":1})") == "unknown");
}
