// The objectives over labelled rows besides supervised contrastive loss: a classification head
// (softmax cross-entropy, ArcFace and CosFace margins) and triplet loss with batch-hard or
// semi-hard mining. Each is a sum of per-anchor terms, so gradcache.cpp computes it in anchor
// chunks like the contrastive losses (docs/gc-train.md, "Objectives"). Needs LibTorch.
#pragma once

#include <torch/torch.h>

#include "traincache/train/gradcache.h"

namespace traincache::train {

/// Rows [a, b) of `z` [B, d] against the classifier of `cfg`: the sum of their cross-entropy
/// terms (target classes `classes` [B], 0-based) divided by `denom`. ArcFace and CosFace compare
/// normalised rows with normalised class weights and add the margin to the target's logit.
torch::Tensor classification_chunk(const torch::Tensor& z, const torch::Tensor& classes, const LossConfig& cfg,
                                   int64_t a, int64_t b, double denom);

/// Anchors [a, b) of `zn` [B, d] (normalised for cosine) against every row: the sum of their
/// triplet terms max(0, s(a,n) - s(a,p) + margin) divided by `denom`. Batch-hard: one term per
/// anchor, its least similar positive and most similar negative. Semi-hard: one term per
/// (anchor, positive) pair, with the most similar negative less similar than the positive, or the
/// least similar negative when none is (FaceNet's rule as TensorFlow Addons implements it).
torch::Tensor triplet_chunk(const torch::Tensor& zn, const torch::Tensor& labels, const LossConfig& cfg, int64_t a,
                            int64_t b, double denom);

/// The number of terms a triplet loss averages over the batch `labels`: anchors with a positive
/// and a negative (batch-hard), or (anchor, positive) pairs whose anchor has a negative (semi-hard);
/// an int64 scalar on the labels' device (nothing is read back).
torch::Tensor triplet_denominator(const torch::Tensor& labels, const LossConfig& cfg);

/// Logits of rows `z` [n, d] as the classifier of `cfg` scores them for prediction: W z + b
/// (softmax), or scale x cos(z, W) without the margin (ArcFace, CosFace).
torch::Tensor class_logits(const torch::Tensor& z, const LossConfig& cfg);

/// A classifier for `classes` classes over `dim`-wide representations as a TorchScript module:
/// parameters `weight` [classes, dim] (and `bias` for softmax) initialised like nn.Linear, the
/// buffer `labels` (the label value of each class) and forward(x) = class_logits(x).
torch::jit::Module make_classifier(LossKind kind, const std::vector<int64_t>& labels, int64_t dim, double scale,
                                   torch::Dtype dtype, torch::Device device);

/// The classifier's parameters in `cfg` (class_weight, class_bias) as a loss uses them.
void use_classifier(LossConfig& cfg, torch::jit::Module& classifier);

}  // namespace traincache::train
