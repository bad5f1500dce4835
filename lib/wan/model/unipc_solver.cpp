#include "wantrain/wan/model/unipc_solver.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace wt::wan {

namespace {

// Solves the small dense system A y = b (Gaussian elimination with partial
// pivoting); A is n x n, row-major.
std::vector<double> solve(std::vector<double> a, std::vector<double> b) {
  const size_t n = b.size();
  for (size_t col = 0; col < n; ++col) {
    size_t pivot = col;
    for (size_t r = col + 1; r < n; ++r)
      if (std::abs(a[r * n + col]) > std::abs(a[pivot * n + col])) pivot = r;
    for (size_t c = 0; c < n; ++c) std::swap(a[col * n + c], a[pivot * n + c]);
    std::swap(b[col], b[pivot]);
    for (size_t r = col + 1; r < n; ++r) {
      const double f = a[r * n + col] / a[col * n + col];
      for (size_t c = col; c < n; ++c) a[r * n + c] -= f * a[col * n + c];
      b[r] -= f * b[col];
    }
  }
  std::vector<double> y(n);
  for (size_t r = n; r-- > 0;) {
    double sum = b[r];
    for (size_t c = r + 1; c < n; ++c) sum -= a[r * n + c] * y[c];
    y[r] = sum / a[r * n + r];
  }
  return y;
}

// The UniPC schedule starts at the training schedule's largest sigma, 1 - 1/1000 in fp32.
constexpr float kFirstSigma = 0.999f;

}  // namespace

UniPCSolver::UniPCSolver(SolverSchedule schedule)
    : FlowSolver(std::move(schedule.sigmas), std::move(schedule.timesteps)) {}

SolverSchedule UniPCSolver::release(int steps, double shift) { return release_schedule(kFirstSigma, steps, shift); }

at::Tensor UniPCSolver::update(int s, int t, const at::Tensor& x, int order, const at::Tensor* newest) const {
  const double sigma_t = sigmas_[t], sigma_s = sigmas_[s], alpha_t = 1.0 - sigma_t;
  const double lambda_s = half_log_snr(sigma_s);
  const double h = half_log_snr(sigma_t) - lambda_s;
  const double h_phi_1 = std::expm1(-h);  // predict-x0: the exponent is -h
  const double b_h = h_phi_1;             // bh2
  const at::Tensor& m0 = data_.back();
  auto x_t = (sigma_t / sigma_s) * x - (alpha_t * h_phi_1) * m0;

  // The earlier predictions' differences, each over its step ratio r_k.
  const int history = order - 1;
  std::vector<double> r(history);
  for (int k = 1; k <= history; ++k) r[k - 1] = (half_log_snr(sigmas_[s - k]) - lambda_s) / h;

  // rho: 1/2 at the lowest order; else from R rho = b with R_jk = r_k^j and
  // b_j = j! * phi_{j+1}(-h) * (-h) / B(h), j = 0.. (the corrector's r_last = 1).
  std::vector<double> rho;
  const int unknowns = newest ? order : history;
  if (unknowns == 1) {
    rho = {0.5};
  } else if (unknowns > 1) {
    std::vector<double> rs = r;
    if (newest) rs.push_back(1.0);
    std::vector<double> matrix(unknowns * unknowns), b(unknowns);
    const double hh = -h;
    double phi = h_phi_1 / hh - 1.0, factorial = 1.0;
    for (int j = 0; j < unknowns; ++j) {
      for (int k = 0; k < unknowns; ++k) matrix[j * unknowns + k] = std::pow(rs[k], j);
      b[j] = phi * factorial / b_h;
      factorial *= j + 2;
      phi = phi / hh - 1.0 / factorial;
    }
    rho = solve(matrix, b);
  }
  const double scale = alpha_t * b_h;
  for (int k = 1; k <= history; ++k) {
    const at::Tensor& mk = data_[data_.size() - 1 - k];
    x_t = x_t - (scale * rho[k - 1] / r[k - 1]) * (mk - m0);
  }
  if (newest) x_t = x_t - (scale * rho.back()) * (*newest - m0);
  return x_t;
}

at::Tensor UniPCSolver::step(int i, const at::Tensor& x, const at::Tensor& velocity) {
  torch::NoGradGuard no_grad;
  const auto m = x - sigmas_[i] * velocity;
  auto sample = x;
  if (i > 0 && last_sample_.defined()) sample = update(i - 1, i, last_sample_, last_order_, &m);  // UniC

  data_.push_back(m);
  if (static_cast<int>(data_.size()) > kOrder) data_.pop_front();
  const int order = std::min({kOrder, steps() - i, lower_order_steps_ + 1});
  last_sample_ = sample;
  last_order_ = order;
  lower_order_steps_ = std::min(lower_order_steps_ + 1, kOrder);
  return update(i, i + 1, sample, order, nullptr);  // UniP
}

}  // namespace wt::wan
