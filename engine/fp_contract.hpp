// The engine's floating-point contract, checked where the kernels are compiled. SIMD kernels are
// held bitwise to plain references doing the same IEEE-754 operations in the same order, so the
// build must neither contract a*b+c into a fused multiply-add (CMakeLists.txt passes
// -ffp-contract=off) nor relax IEEE semantics (-ffast-math and its parts are refused here, at
// compile time). The contraction part cannot be seen by the preprocessor; the probes in
// engine/optim/adam_simd.cpp are compiled under the kernels' own flags and targets, and
// tests/fp_contract_test.cpp fails on any machine when they fuse. Header-only, stateless.
#pragma once

#if defined(__FAST_MATH__)
#error "zinf's kernels need IEEE semantics: build without -ffast-math (see engine/fp_contract.hpp)"
#endif
#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "zinf detects NaN and Inf in training: build without -ffinite-math-only (see engine/fp_contract.hpp)"
#endif
