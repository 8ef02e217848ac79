#include "traincache/model/precision_torch.h"

#include <cmath>

#include "catch.h"
#include "test_util.h"
#include "traincache/train/gradcache.h"

using namespace traincache;

CATCH_TEST_CASE("autocast: a bf16 region on the CPU, nested regions restore the outer state", "[precision]") {
  auto a = torch::randn({4, 8}), b = torch::randn({8, 3});
  CATCH_CHECK(torch::matmul(a, b).scalar_type() == torch::kFloat);
  {
    model::Autocast region(Precision::bf16, torch::kCPU);
    CATCH_CHECK(torch::matmul(a, b).scalar_type() == torch::kBFloat16);
    {
      model::Autocast inner(Precision::fp32, torch::kCPU);  // fp32: no change
      CATCH_CHECK(torch::matmul(a, b).scalar_type() == torch::kBFloat16);
    }
    {
      model::Autocast inner(Precision::bf16, torch::kCPU);
      CATCH_CHECK(torch::matmul(a, b).scalar_type() == torch::kBFloat16);
    }
    CATCH_CHECK(torch::matmul(a, b).scalar_type() == torch::kBFloat16);
  }
  CATCH_CHECK(torch::matmul(a, b).scalar_type() == torch::kFloat);
  // Within bfloat16's 8 bits of mantissa of the float32 product.
  torch::Tensor low;
  {
    model::Autocast region(Precision::bf16, torch::kCPU);
    low = torch::matmul(a, b).to(torch::kFloat);
  }
  auto exact = torch::matmul(a, b);
  CATCH_CHECK(((low - exact).abs().max() / exact.abs().max()).item<double>() < 0.02);
  CATCH_CHECK(!torch::equal(low, exact));
}

CATCH_TEST_CASE("autocast: fp16 needs CUDA", "[precision]") {
  CATCH_CHECK(
      test::message_of([] { model::check_precision(Precision::fp16, false, "--precision"); }) ==
      "--precision: fp16 needs a CUDA device (LibTorch's CPU autocast runs bfloat16 only); use bf16 on the CPU");
  CATCH_CHECK(test::code_of([] { model::check_precision(Precision::bf16, false, "--precision"); }) == Exit::ok);
}

CATCH_TEST_CASE("grad scaler: unscales, skips non-finite steps halving the scale, grows after an interval",
                "[precision]") {
  auto w = torch::ones({3}).requires_grad_(true);
  model::GradScaler off(false);
  w.mutable_grad() = torch::full({3}, 8.0);
  CATCH_CHECK(off.scale() == 1);
  CATCH_CHECK(off.unscale({w}));
  CATCH_CHECK(w.grad()[0].item<double>() == 8.0);

  model::GradScaler s(true, 1024, 3);
  CATCH_CHECK(s.scale() == 1024);
  w.mutable_grad() = torch::full({3}, 512.0);
  CATCH_CHECK(s.unscale({w}));
  CATCH_CHECK(w.grad()[1].item<double>() == 0.5);
  CATCH_CHECK(s.update(true));
  CATCH_CHECK(s.update(true));
  CATCH_CHECK(s.scale() == 1024);
  CATCH_CHECK(s.update(true));  // the third finite step in a row doubles it
  CATCH_CHECK(s.scale() == 2048);
  w.mutable_grad() = torch::tensor({1.0, static_cast<double>(INFINITY), 0.0}).to(torch::kFloat);
  CATCH_CHECK(!s.unscale({w}));
  CATCH_CHECK(!s.update(false));  // skipped
  CATCH_CHECK(s.scale() == 1024);
  model::GradScaler r(true);
  r.restore(s.state());
  CATCH_CHECK(r.scale() == 1024);
  CATCH_CHECK(r.state() == s.state());
  CATCH_CHECK(test::code_of([&] { r.restore("x"); }) == Exit::data);
}

CATCH_TEST_CASE("grad scaler: a scaled loss leaves scaled representation gradients and the same value", "[precision]") {
  torch::manual_seed(4);
  auto q0 = torch::randn({6, 4}, torch::kFloat64), p0 = torch::randn({6, 4}, torch::kFloat64);
  train::LossConfig cfg;
  cfg.anchor_chunk = 4;
  auto q = q0.clone().requires_grad_(true), p = p0.clone().requires_grad_(true);
  double plain = train::loss_with_rep_grads(q, p, {}, cfg).item<double>();
  auto gq = q.grad().clone();
  cfg.grad_scale = 1024;
  auto q2 = q0.clone().requires_grad_(true), p2 = p0.clone().requires_grad_(true);
  CATCH_CHECK(train::loss_with_rep_grads(q2, p2, {}, cfg).item<double>() == Approx(plain).epsilon(1e-14));
  CATCH_CHECK(((q2.grad() / 1024 - gq).abs().max()).item<double>() < 1e-15);
}
