#include "traincache/model/encode.h"

#include <cstdio>

#include "catch.h"
#include "test_util.h"
#include "traincache/base/error.h"
#include "traincache/io/h5.h"
#include "traincache/model/precision.h"
#include "traincache/model/precision_torch.h"
#include "traincache/train/shuffle.h"

// torch/csrc/jit/passes/tensorexpr_fuser.h's, declared as libcore's encode.cpp does (not every
// LibTorch package ships that header).
namespace torch::jit {
TORCH_API void setTensorExprFuserEnabled(bool val);
TORCH_API bool tensorExprFuserEnabled();
}  // namespace torch::jit

using namespace traincache;

namespace {

// Saves a TorchScript module whose forward is `body` (TorchScript source) and returns its path.
std::string save_module(const std::string& name, const std::string& body) {
  torch::jit::Module m("M");
  m.register_parameter("w", torch::full({1}, 2.0), false);
  m.define(body);
  std::string path = name + ".pt";
  m.save(path);
  return path;
}

io::h5::DatasetInfo write_dataset(const std::string& path, hid_t type, const void* data) {
  io::h5::Id f = io::h5::create_file(path);
  hsize_t dims[2] = {2, 3};
  io::h5::Id space(H5Screate_simple(2, dims, nullptr));
  io::h5::Id d(H5Dcreate2(f.get(), "x", type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  H5Dwrite(d.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  return io::h5::describe(d.get(), "x");
}

torch::Tensor read_back(const std::string& path, double scale) {
  return model::read_column_rows(*io::source::open_column(path, "x"), 0, 2, scale);
}

}  // namespace

CATCH_TEST_CASE("encoder input: uint8 becomes float32 times the scale", "[encoder]") {
  uint8_t px[6] = {0, 51, 102, 153, 204, 255};
  write_dataset("enc_u8.h5", H5T_NATIVE_UINT8, px);
  auto t = read_back("enc_u8.h5", 1.0 / 255);
  CATCH_CHECK(t.scalar_type() == torch::kFloat32);
  CATCH_CHECK(t.sizes() == torch::IntArrayRef({2, 3}));
  CATCH_CHECK(t[1][2].item<float>() == 1.0f);
  CATCH_CHECK(t[0][1].item<float>() == Approx(0.2).epsilon(1e-6));
}

CATCH_TEST_CASE("encoder input: other integers become int64, floats float32", "[encoder]") {
  int16_t ids[6] = {1, 2, 3, -4, 5, 6};
  write_dataset("enc_i16.h5", H5T_NATIVE_INT16, ids);
  auto t = read_back("enc_i16.h5", 1.0 / 255);
  CATCH_CHECK(t.scalar_type() == torch::kInt64);
  CATCH_CHECK(t[1][0].item<int64_t>() == -4);
  double v[6] = {0.5, 1, 2, 3, 4, 5};
  write_dataset("enc_f64.h5", H5T_NATIVE_DOUBLE, v);
  auto f = read_back("enc_f64.h5", 1.0 / 255);
  CATCH_CHECK(f.scalar_type() == torch::kFloat32);
  CATCH_CHECK(f[0][0].item<float>() == 0.5f);
}

CATCH_TEST_CASE("encoder: --output picks a tuple element or a dict entry", "[encoder]") {
  auto x = torch::ones({4, 3});
  model::Encoder tup("t", save_module("enc_tuple", "def forward(self, x):\n  return (x * self.w, x.sum(1))\n"),
                     torch::kCPU, "1");
  CATCH_CHECK(tup.forward({x}).sizes() == torch::IntArrayRef({4}));
  CATCH_CHECK(tup.forward({x})[0].item<float>() == 3.0f);
  model::Encoder dict("d", save_module("enc_dict", "def forward(self, x):\n  return {'emb': x * self.w, 'n': x}\n"),
                      torch::kCPU, "emb");
  CATCH_CHECK(dict.forward({x})[0][0].item<float>() == 2.0f);
}

CATCH_TEST_CASE("encoder: a tuple output without --output is bad data with advice", "[encoder]") {
  model::Encoder tup("t", save_module("enc_tuple2", "def forward(self, x):\n  return (x, x)\n"), torch::kCPU);
  try {
    tup.forward({torch::ones({2, 2})});
    CATCH_FAIL("accepted");
  } catch (const Error& e) {
    CATCH_CHECK(e.code() == Exit::data);
    CATCH_CHECK(std::string(e.what()) == "encoder 't': output is a tuple; select a tensor with --output KEY|INDEX");
  }
}

CATCH_TEST_CASE("encoder: a module that mixes devices is refused with the tracing advice", "[encoder]") {
  // What a transformer traced on the CPU says on CUDA (its attention bias was made on the CPU);
  // raised here by the module itself, as no device is needed to check the advice.
  model::Encoder mixed("m",
                       save_module("enc_mixed",
                                   "def forward(self, x):\n  assert x.size(0) < 0, 'Expected all tensors to be on "
                                   "the same device, but got attn_bias is on cpu'\n  return x\n"),
                       torch::kCPU);
  try {
    mixed.forward({torch::ones({2, 2})});
    CATCH_FAIL("accepted");
  } catch (const Error& e) {
    CATCH_CHECK(e.code() == Exit::data);
    CATCH_CHECK_THAT(std::string(e.what()),
                     Catch::Matchers::EndsWith("(a module traced on one device keeps the tensors it made there: "
                                               "trace it on the device it runs on, docs/models.md)"));
  }
}

CATCH_TEST_CASE("encoder: varying shapes on CUDA turn off the per-shape fuser and cuDNN attention", "[encoder]") {
  // Process-wide switches: set them back for the tests after this one.
  const bool fuser = torch::jit::tensorExprFuserEnabled();
  model::for_varying_shapes(torch::kCPU);
  CATCH_CHECK(torch::jit::tensorExprFuserEnabled() == fuser);
  torch::jit::setTensorExprFuserEnabled(true);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  at::globalContext().setSDPUseCuDNN(true);
#endif
  model::for_varying_shapes(torch::Device("cuda:0"));  // no device needed: only LibTorch's switches
  CATCH_CHECK_FALSE(torch::jit::tensorExprFuserEnabled());
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  CATCH_CHECK_FALSE(at::globalContext().userEnabledCuDNNSDP());
  at::globalContext().setSDPUseCuDNN(true);
#endif
  torch::jit::setTensorExprFuserEnabled(fuser);
  CATCH_CHECK(model::optimise_for(torch::kCPU, true));
  CATCH_CHECK(model::optimise_for(torch::Device("cuda:0"), false));
  CATCH_CHECK_FALSE(model::optimise_for(torch::Device("cuda:0"), true));
}

CATCH_TEST_CASE("encoder: the optimised module is kept only when it matches the plain one", "[encoder]") {
  model::Encoder lin("l", save_module("enc_lin", "def forward(self, x):\n  return torch.relu(x * self.w + 1.0)\n"),
                     torch::kCPU);
  auto x = torch::randn({8, 5});
  auto plain = lin.forward({x});
  auto o = lin.try_optimize({x}, 1e-4);
  CATCH_CHECK(o.used);
  CATCH_CHECK(std::string(lin.inference()) == "optimized");
  CATCH_CHECK(o.max_abs_diff <= 1e-4);
  CATCH_CHECK(torch::allclose(lin.forward({x}), plain));
}

CATCH_TEST_CASE("encoder: on the CPU the optimised-module check runs in full float32", "[encoder]") {
  model::Encoder lin("l", save_module("enc_lin2", "def forward(self, x):\n  return x * self.w\n"), torch::kCPU);
  model::allow_tf32(true);  // TF32 is a cuDNN matter: the CPU stays IEEE whatever the setting
  auto o = lin.try_optimize({torch::randn({4, 5})}, 1e-4);
  CATCH_CHECK(o.used);
  CATCH_CHECK(o.math == "ieee");
  CATCH_CHECK(o.plain_diff == 0);
  CATCH_CHECK(std::string(model::math_mode(torch::kCPU)) == "ieee");
  CATCH_CHECK(std::string(model::math_mode(torch::Device(torch::kCUDA, 0))) == "tf32");
  {
    model::FullFloat32 full;
    CATCH_CHECK(std::string(model::math_mode(torch::Device(torch::kCUDA, 0))) == "ieee");
  }
  CATCH_CHECK(std::string(model::math_mode(torch::Device(torch::kCUDA, 0))) == "tf32");  // restored
  model::allow_tf32(false);
  CATCH_CHECK(std::string(model::math_mode(torch::Device(torch::kCUDA, 0))) == "ieee");
  model::allow_tf32(true);
}

CATCH_TEST_CASE("encoder: in TF32 the optimised module may differ as much as TF32 makes the plain one", "[encoder]") {
  // Full float32: rtol x scale only.
  CATCH_CHECK(model::optimised_within(0.5e-4, 0, 1.0, 1e-4));
  CATCH_CHECK_FALSE(model::optimised_within(2e-4, 0, 1.0, 1e-4));
  CATCH_CHECK(model::optimised_within(2e-4, 0, 4.0, 1e-4));  // relative to the largest magnitude
  // TF32: the plain module itself is 0.01 off full float32; the optimised one may be 3x that.
  CATCH_CHECK(model::optimised_within(0.0334, 0.0112, 1.0, 1e-4));
  CATCH_CHECK_FALSE(model::optimised_within(0.0340, 0.0112, 1.0, 1e-4));
  CATCH_CHECK_FALSE(model::optimised_within(std::nan(""), 0.01, 1.0, 1e-4));
}

CATCH_TEST_CASE("encoder: a device that is not cpu or cuda is a usage error", "[encoder]") {
  try {
    model::parse_device("tpu:0");
    CATCH_FAIL("accepted");
  } catch (const Error& e) {
    CATCH_CHECK(e.code() == Exit::usage);
  }
  CATCH_CHECK(model::parse_device("cpu").is_cpu());
}

// The tools read --device without LibTorch before they load it (model/precision.h): what that
// accepts, LibTorch's own parse (torch::Device) accepts as the same type; the rest, including what
// some LibTorch versions take but a tool never meant (cpu:1 in 1.13), is the usage error
// parse_device gives.
CATCH_TEST_CASE("encoder: the torch-free --device check accepts only what LibTorch parses", "[encoder]") {
  for (const std::string spec : {"cpu", "cpu:0", "cuda", "cuda:0", "cuda:7", "cuda:10"}) {
    CATCH_INFO("'" << spec << "'");
    CATCH_CHECK(torch::Device(spec).is_cuda() == model::parse_device_spec(spec).cuda);
  }
  for (const std::string spec : {"cpu:1", "cuda:01", "cuda:-1", "cuda:", "CUDA", "Cpu", "gpu", "mps", "meta", "tpu:0",
                                 "", " cpu", "cuda:0 ", "cuda:1:2", "cuda0"}) {
    CATCH_INFO("'" << spec << "'");
    const std::string want = "--device: expected cpu or cuda[:N], got '" + spec + "'";
    CATCH_CHECK(test::message_of([&] { model::parse_device_spec(spec); }) == want);
    CATCH_CHECK(test::message_of([&] { model::parse_device(spec); }) == want);
  }
}

CATCH_TEST_CASE("shuffle: the serial permutation is torch::randperm's for the same seed", "[encoder]") {
  for (int64_t n : {0, 1, 2, 7, 1000, 60000, 100003}) {
    for (uint64_t seed : {0ull, 1ull, 1000003ull * 42 + 3}) {
      CATCH_INFO("n " << n << " seed " << seed);
      auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
      auto want = torch::randperm(n, gen, torch::kLong);
      auto got = train::seeded_permutation(n, seed);
      CATCH_REQUIRE(static_cast<int64_t>(got.size()) == n);
      CATCH_CHECK(std::equal(got.begin(), got.end(), want.data_ptr<int64_t>()));
    }
  }
  // A different seed, a different order.
  CATCH_CHECK(train::seeded_permutation(1000, 1) != train::seeded_permutation(1000, 2));
}
