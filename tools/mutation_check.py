#!/usr/bin/env python3
"""Mutation check: plants known bugs in the kernels and the library, one at a time, and requires
each to be caught by the default test set (docs/RELIABILITY.md, "Mutation check").

For every mutation: the patch is applied to a scratch worktree of the repository at --rev (git
worktree add --detach; the repository's own files are never touched: uncommitted changes are not
checked), the worktree is rebuilt incrementally in one build folder kept for the whole run (a
shader change recompiles that shader's variants and relinks; a C++ change recompiles one file),
the tests run through CTest as the default CI run runs them (tools/run_tests.sh: every test,
PSK_REQUIRE_VALIDATION=1), the failed tests are recorded, and the file is restored. Tests that fail
before any mutation (the baseline run) are left out and named.

Each patch replaces an exact piece of text that must occur exactly once in its file: when the code
moves, the anchor is not found and the mutation is reported STALE (not caught, not survived), so
the table never silently checks nothing. A mutation that no longer compiles is reported BUILD.

Modes:
  (default)  the whole default test set per mutation (CTest without filters, minus the labels
             `mutation`, this check itself, and `cases`, the per-case tests of the sweeps the default
             run takes as shards): ~70 min on two idle cores (.ci/mutation);
  --quick    per mutation, the few tests listed with it below (known to catch it); each build then
             relinks only the executables of those tests: ~2 min on two idle cores, a fresh build
             of the worktree included (the CTest test mutation_check_quick, label `mutation`);
  --tests R  per mutation, the tests whose names match the Python regex R (to find catchers).
Exit status: 0 when every mutation is caught; 1 when one survives, is stale or fails to build (or a
quick-list test no longer exists); 2 on a setup error.

  python3 tools/mutation_check.py --quick                  # the CTest test's run
  python3 tools/mutation_check.py --only scan_carry,gqa_team_output   # full default set for two
  python3 tools/mutation_check.py --list                   # mutations and anchors, nothing built
  python3 tools/mutation_check.py --quick --work /tmp/m --keep   # keep worktree + build to reuse
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
MUTATION_LABEL = "mutation"  # the CTest label of this check: never run from inside itself
CASES_LABEL = "cases"  # the sharded sweeps' per-case tests (tests/CMakeLists.txt): not in the default set


@dataclass
class Patch:
    path: str  # relative to the repository root
    old: str   # exact text, must occur exactly once
    new: str


@dataclass
class Mutation:
    name: str
    what: str
    patches: List[Patch]
    quick: List[str] = field(default_factory=list)  # CTest names known to catch it (--quick)


def P(path, old, new):
    return Patch(path, old, new)


# The planted bugs. `quick` lists a few cheap tests that caught the mutation in a full run
# (docs/RELIABILITY.md has the last table); a name that no longer exists fails the check. Names are
# CTest's without the "  # GetParam() = ..." that gtest_discover_tests appends (see norm()).
MUTATIONS: List[Mutation] = [
    Mutation("output_diag_generic",
             "polysketch output (generic kernel): causal mask drops the diagonal (j < i)",
             [P("shaders/polysketch_output.comp",
                "wv[i] = m < KPI && row < tile_rows && j < tile_len && tile_start + j <= tile_begin + row ? x : 0.0;",
                "wv[i] = m < KPI && row < tile_rows && j < tile_len && tile_start + j < tile_begin + row ? x : 0.0;")],
             quick=["generic_output_tiles.Sweeps"]),
    Mutation("output_diag_rows",
             "polysketch output (generic row kernel): causal mask drops the diagonal (j < i)",
             [P("shaders/polysketch_output_rows.comp",
                "w[r] = row_valid[r] && tile_start + j <= crow[r] ? x : 0.0;",
                "w[r] = row_valid[r] && tile_start + j < crow[r] ? x : 0.0;")],
             quick=["generic_kernels.Sweep/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b48_causal_f32_bhnd_B1_Hq2_Hkv1_n243_h32_dv32",
                    "generic_kernels.ContextTest.ForwardThenStepsEqualWhole"]),
    Mutation("output_zslice_generic",
             "polysketch output (generic kernel): phi(q)^T Z reads another invocation's value columns of Z",
             [P("shaders/polysketch_output.comp",
                "if (t < COL_VEC4) cols[t] = pool[Z_OFF / 4u + k * ZW4 + cg + COL_GROUPS * t];",
                "if (t < COL_VEC4) cols[t] = pool[Z_OFF / 4u + k * ZW4 + cg * COL_VEC4 + t];")],
             quick=["generic_output_tiles.Sweeps"]),
    Mutation("features_scol_generic",
             "feature map (generic kernel, p = 4 random sketch): S columns of the product written to the wrong places",
             [P("shaders/sketch_features.comp",
                "[[unroll]] for (uint m = 0u; m < 8u; ++m) gt[(4u * r4 + e) * SS + cg + 4u * m] = params.node_scale * a[e][m] * b[e][m];",
                "[[unroll]] for (uint m = 0u; m < 8u; ++m) gt[(4u * r4 + e) * SS + cg * 8u + m] = params.node_scale * a[e][m] * b[e][m];")],
             quick=["generic_kernels.Sweep/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b48_causal_f32_bhnd_B1_Hq2_Hkv1_n243_h32_dv32"]),
    Mutation("states_psi_generic",
             "block states (generic kernel): psi expanded from the staged S(k) row with the pair's first entry twice",
             [P("shaders/block_states.comp",
                "coef_of[q] * sk_tile[j * SKETCH + a] * sk_tile[j * SKETCH + b];",
                "coef_of[q] * sk_tile[j * SKETCH + a] * sk_tile[j * SKETCH + a];")],
             quick=["generic_kernels.Cases/BlockStates.StatesMatchReference/random_p4_r16_b32_h32_dv32_n163_causal_Hq2_Hkv1_B1"]),
    Mutation("states_value_rows_unpadded",
             "block states (generic kernel): the value tile read without the padding it was staged with",
             [P("shaders/block_states.comp",
                "const vec4 v = v_tile[j * TILE_C4P + cg * CPT4P + m4];",
                "const vec4 v = v_tile[j * TILE_C4P + cg * CPT4 + m4];")],
             quick=["generic_kernels.Cases/BlockStates.StatesMatchReference/random_p4_r16_b32_h32_dv32_n163_causal_Hq2_Hkv1_B1"]),
    Mutation("states_split_v_dropped",
             "block states (cooperative kernel, float32 storage): the A_hi V_lo products left out, V one float16 operand",
             [P("shaders/block_states_coopmat.comp",
                "if (part == 1u && SPLIT_V != 0u) {",
                "if (part == 1u && SPLIT_V == 2u) {")],
             quick=["TuningOnDevice.Float32SplitProductsOnlyWhereAskedOrMeasured"]),
    Mutation("output_split_v_lo_is_hi",
             "polysketch output (cooperative kernel, float32 storage): the local part's W_hi V_lo product reads V_hi",
             [P("shaders/polysketch_output_coopmat.comp",
                "CM_LOAD_ROW_B(mb_lo, op_pool, OP_V + V_LO + kk * LDB + t * CM_N, LDB);",
                "CM_LOAD_ROW_B(mb_lo, op_pool, OP_V + kk * LDB + t * CM_N, LDB);")],
             quick=["TuningOnDevice.Float32SplitProductsOnlyWhereAskedOrMeasured"]),
    Mutation("output_fused_query_node_scale",
             "polysketch output (cooperative kernel, FUSED_QUERY): S(q) computed from q without the sketch's node scale",
             [P("shaders/polysketch_output_coopmat.comp",
                "const float s = params.node_scale * a[j] * b[j];",
                "const float s = a[j] * b[j];")],
             # Several blocks: in a single block of local exact weights S(q) is never read.
             quick=["coopmat_emulated.Sweep16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b16_causal_bf16_bhnd_B1_Hq2_Hkv1_n83_h32_dv32"]),
    Mutation("output_fused_query_ln_variance",
             "polysketch output (cooperative kernel, FUSED_QUERY with LayerNorm): the row's variance not divided by h",
             [P("shaders/polysketch_output_coopmat.comp",
                "ln_row[r] = vec2(mean, inversesqrt(var / float(HEAD_DIM) + LN_EPS));",
                "ln_row[r] = vec2(mean, inversesqrt(var + LN_EPS));")],
             quick=["coopmat_emulated.Sweep16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b16_causal_localexact_ln_bf16_bhnd_B1_Hq2_Hkv1_n45_h32_dv32"]),
    Mutation("output_coop_prefix_first_ignored",
             "polysketch output (cooperative kernel): a forward continuing a state skips block 0's prefix (the state's z)",
             [P("shaders/polysketch_output_coopmat.comp",
                "(!CAUSAL || block > 0u || params.prefix_first != 0u)",
                "(!CAUSAL || block > 0u)")],
             quick=["coopmat_emulated_f32.StatePassing"]),
    Mutation("output_diag_team",
             "polysketch output (lane-team kernel, lavapipe's default): causal mask drops the diagonal",
             [P("shaders/polysketch_output_team.comp",
                "w[kk][r] = row < team_last && j <= row ? x : 0.0;",
                "w[kk][r] = row < team_last && j < row ? x : 0.0;")],
             quick=["Shapes/TeamKernels.TeamAndGenericMatchFloat64Reference/f32_r16_b32_h32_dv4_n70_causal_bhnd_B1_Hq2_Hkv1",
                    "Sweep16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b48_causal_f16_bhnd_B1_Hq2_Hkv1_n48_h32_dv32"]),
    Mutation("output_diag_coopmat",
             "polysketch output (cooperative kernel, emulated backend): causal mask drops the diagonal",
             [P("shaders/polysketch_output_coopmat.comp",
                "const float w = i < row_end && j <= i ? (LOCAL_EXACT ? weight_power(x) : x * x) : 0.0;",
                "const float w = i < row_end && j < i ? (LOCAL_EXACT ? weight_power(x) : x * x) : 0.0;")],
             quick=["coopmat_emulated.Sweep16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b16_causal_f16_bhnd_B1_Hq2_Hkv1_n15_h32_dv32",
                    "coopmat_emulated.Sweep16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b16_causal_localexact_bf16_bhnd_B1_Hq2_Hkv1_n15_h32_dv32"]),
    Mutation("scan_carry",
             "block_scan.comp: the carry between segments is replaced, not accumulated (carry = total)",
             [P("shaders/block_scan.comp", "carry += total;", "carry = total; ")],
             quick=["Sizes/BlockScan.MatchesReferenceExactly/scan_s1_t1000_e3_scalar",
                    "Sizes/BlockScan.MatchesReferenceExactly/scan_s1_t257_e12_vec4"]),
    Mutation("scan_tail_last_block",
             "block_scan.comp: the tail (decode state after a call) drops the last block's own sum",
             [P("shaders/block_scan.comp", "DATA[i] = prefix + own;", "DATA[i] = prefix;      ")],
             quick=["ContextTest.ScanStartsFromAnInitialPrefix",
                    "Polysketch/ChunksEqualWhole.RowsAndFinalState/local_degree8"]),
    Mutation("team_future_key",
             "polysketch output (lane-team kernel): each row also sees the next key (j <= i + 1)",
             [P("shaders/polysketch_output_team.comp",
                "w[kk][r] = row < team_last && j <= row ? x : 0.0;",
                "w[kk][r] = row < team_last && j <= row + 1u ? x : 0.0;")],
             quick=["Shapes/TeamKernels.TeamAndGenericMatchFloat64Reference/f16_r8_b32_h32_dv64_n19_causal_bhnd_B2_Hq2_Hkv2_pad2",
                    "Sweep16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b48_causal_f16_bhnd_B1_Hq2_Hkv1_n48_h32_dv32"]),
    Mutation("ln_eps_team",
             "feature map (lane-team kernel): LayerNorm eps 1e-5 -> 1e-4",
             [P("shaders/sketch_features_team.comp", "const float LN_EPS = 1e-5;", "const float LN_EPS = 1e-4;")],
             quick=["Cases/FeatureMap.SketchRowsMatchReference/random_p4_r16_b32_h32_dv32_n70_causal_localexact_ln_Hq2_Hkv1_B1",
                    "Cases/FeatureMap.SketchRowsMatchReference/random_p4_r16_b32_h32_dv32_n70_causal_localexact_ln_localln_Hq4_Hkv2_B2"]),
    Mutation("sketch_column_team",
             "feature map (lane-team kernel): sketch column c reads the weights of column c + 1",
             [P("shaders/sketch_features_team.comp",
                "const uint col = min(col0 + 4u * c + e, SKETCH - 1u);",
                "const uint col = min(col0 + 4u * c + e + 1u, SKETCH - 1u);")],
             quick=["Cases/FeatureMap.SketchRowsMatchReference/random_p4_r16_b32_h32_dv32_n70_causal_localexact_ln_Hq2_Hkv1_B1",
                    "Cases/BlockStates.StatesMatchReference/random_p4_r16_b32_h32_dv32_n32_full_Hq2_Hkv1_B1"]),
    Mutation("coop_scale_not_undone",
             "polysketch output (cooperative kernel, emulated): the local weights' power-of-two scale is not undone",
             [P("shaders/polysketch_output_coopmat.comp",
                "const float back = (1.0 / w_scale) * inv_v;",
                "const float back = inv_v;")],
             quick=["coopmat_emulated.Sweep16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b16_causal_f16_bhnd_B1_Hq2_Hkv1_n15_h32_dv32",
                    "coopmat_emulated.Sweep16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b16_causal_bf16_bhnd_B1_Hq2_Hkv1_n16_h32_dv32"]),
    Mutation("states_pairs_once_second_is_first",
             "block states (cooperative kernel): the pair entries decoded once per workgroup give psi_f = S_a S_a",
             [P("shaders/block_states_coopmat.comp",
                "pair_b[q] = pair_second(entry);",
                "pair_b[q] = pair_first(entry);")],
             quick=["coopmat_emulated.Sweep16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b16_causal_bf16_bhnd_B1_Hq2_Hkv1_n83_h32_dv32"]),
    Mutation("output_pairs_once_unscaled",
             "polysketch output (cooperative kernel): phi(q)'s coefficients decoded once per chunk leave out the operand scale",
             [P("shaders/polysketch_output_coopmat.comp",
                "pc[q] = chunk_pair(f0, (q * THREADS + lid) % FEAT_CHUNK, flen, a_scale, pa[q], pb[q]);",
                "pc[q] = chunk_pair(f0, (q * THREADS + lid) % FEAT_CHUNK, flen, 1.0, pa[q], pb[q]);")],
             # The GPU's tiling (32 invocations, chunks of 32): the emulation's own (24) decodes per element.
             quick=["coopmat_gpu_tiles.GpuTiles16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b32_causal_f16_bhnd_B1_Hq2_Hkv1_n163_h16_dv24"]),
    Mutation("states_walk_inclusive",
             "walking block states (cooperative, emulated): a block's Z_l includes its own H_l (inclusive prefix)",
             [P("shaders/block_states_coopmat.comp",
                "const uint target = WALK == 0u ? block : WALK == 1u ? block + 1u : 0u;",
                "const uint target = WALK == 0u ? block : WALK == 1u ? block : 0u;")],
             quick=["StatesWalk.WalkEqualsPerBlockAndScan",
                    "coopmat_emulated.Sweep16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b32_causal_localexact_f16_bnhd_B2_Hq4_Hkv2_n53_h32_dv32"]),
    Mutation("states_tile_scale",
             "block states (cooperative, emulated): a key tile's value scale is not undone when it joins the sum",
             [P("shaders/block_states_coopmat.comp",
                "CM_ADD_SCALED(total[a][b], acc[a][b], inv_a * inv_b);",
                "CM_ADD_SCALED(total[a][b], acc[a][b], inv_a);")],
             quick=["coopmat_emulated.Sweep16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b32_causal_localexact_f16_bnhd_B2_Hq4_Hkv2_n53_h32_dv32",
                    "coopmat_gpu_tiles.GpuTiles16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b32_causal_f16_bhnd_B1_Hq2_Hkv1_n163_h16_dv24"]),
    Mutation("gqa_team_output",
             "polysketch output (lane-team kernel): GQA kv head = q head instead of q head / ratio",
             [P("shaders/polysketch_output_team.comp",
                "const uint kv_head = q_head / params.head_ratio;",
                "const uint kv_head = q_head;")],
             quick=["Sweep16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b48_full_bf16_bhnd_B1_Hq2_Hkv1_n243_h32_dv32",
                    "Shapes/TeamKernels.TeamAndGenericMatchFloat64Reference/f32_r16_b32_h32_dv4_n70_causal_bhnd_B1_Hq2_Hkv1"]),
    Mutation("bnhd_strides",
             "BNHD layout: token and head strides swapped (lib/forward/attention_config.cpp defaultStrides)",
             [P("lib/forward/attention_config.cpp",
                "if (layout == PSK_LAYOUT_BNHD) return {n * H * d, d, H * d};",
                "if (layout == PSK_LAYOUT_BNHD) return {n * H * d, H * d, d};")],
             quick=["DefaultStrides.Bnhd",
                    "Sweep/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b32_causal_f16_bnhd_B2_Hq4_Hkv2_n53_h32_dv32",
                    "Sweep/BaselineConformance.MatchesFloat64Reference/softmax_causal_f32_bnhd_B2_Hq3_Hkv1_n65_h32_dv32"]),
    Mutation("decode_position",
             "decoding (shaders/decode_output.comp): the new token's k' row kept one row late",
             [P("shaders/decode_output.comp",
                "BLOCK_K(k_base + before * HEAD_DIM + d) = kl[d];",
                "BLOCK_K(k_base + ((before + 1u) % BLOCK) * HEAD_DIM + d) = kl[d];")],
             quick=["Polysketch/DecodeMatchesForward.PromptThenStepsAcrossBlocks/random_p4_localexact_dv13",
                    "ContextTest.ForwardThenStepsEqualWhole"]),
    Mutation("decode_replay_steps",
             "replayable decode steps (shaders/decode_output.comp): the device's count of executed steps never advances",
             [P("shaders/decode_output.comp",
                "if (slot == 0u) atomicAdd(ws[params.steps], 1u);",
                "if (slot == 0u) atomicAdd(ws[params.steps], 0u);")],
             quick=["ContextTest.ReplayedStepMatchesHostSteps"]),
    Mutation("decode_combine_surplus",
             "decoding (shaders/decode_output.comp): the slot's last workgroup adds the clamped surplus of its last chunk of partials",
             [P("shaders/decode_output.comp",
                "acc[i] += s0 + u < groups ? part[u * ACC + i] : 0.0;",
                "acc[i] += part[u * ACC + i];")],
             quick=["Polysketch/DecodeMatchesForward.PromptThenStepsAcrossBlocks/random_p4_localexact_dv13",
                    "ContextTest.ForwardThenStepsEqualWhole"]),
    Mutation("decode_combine_chunk_step",
             "decoding (shaders/decode_output.comp): the last workgroup's chunks of partials step one group too far (a group left out)",
             [P("shaders/decode_output.comp",
                "s0 < groups; s0 += COMBINE_CHUNK) {",
                "s0 < groups; s0 += COMBINE_CHUNK + 1u) {")],
             quick=["Kinds/SplitDecodeStep.MatchesForwardAcrossBlocksResetAndRestore/localexact_many_groups",
                    "Kinds/SplitDecodeStep.MatchesForwardAcrossBlocksResetAndRestore/localexact_many_groups_dv70"]),
    Mutation("decode_token_value_row",
             "decoding (shaders/decode_output.comp): the token's own value row read from the block's memory (the finished row loaded in its place) instead of the step's v",
             [P("shaders/decode_output.comp",
                "(j == before ? xt : xv)",
                "(j == before ? xv : xv)")],
             quick=["Polysketch/DecodeMatchesForward.PromptThenStepsAcrossBlocks/random_p4_localexact_dv13",
                    "ContextTest.ForwardThenStepsEqualWhole"]),
    Mutation("decode_softmax_token_key",
             "softmax decode step (shaders/decode_softmax.comp): the token's own key read from the cache (the stored row loaded in its place) instead of the step's k",
             [P("shaders/decode_softmax.comp",
                "const float k = j == before ? kt : kc[u];",
                "const float k = kc[u];")],
             quick=["Kinds/SplitDecodeStep.MatchesForwardAcrossBlocksResetAndRestore/softmax_slice5",
                    "Kinds/SplitDecodeStep.MatchesForwardAcrossBlocksResetAndRestore/softmax_odd_gqa3"]),
    Mutation("decode_softmax_value_rows_past_tile",
             "softmax decode step (shaders/decode_softmax.comp): the clamped value rows past the tile's keys summed",
             [P("shaders/decode_softmax.comp",
                "            [[unroll]] for (uint u = 0u; u < V_CHUNK; ++u)\n                if (u0 + u < n)",
                "            [[unroll]] for (uint u = 0u; u < V_CHUNK; ++u)\n                if (true)")],
             quick=["Kinds/SplitDecodeStep.MatchesForwardAcrossBlocksResetAndRestore/softmax_slice5",
                    "Kinds/SplitDecodeStep.MatchesForwardAcrossBlocksResetAndRestore/softmax_odd_gqa3"]),
    Mutation("generic_rows_entry_ignored",
             "planner (lib/forward/polysketch_plan.cpp): a table's output.generic_rows is read but the model's choice taken",
             [P("lib/forward/polysketch_plan.cpp",
                "(choice == GenericOutputChoice::Auto && (rowsEntry ? rowsEntry->value != 0 : small))",
                "(choice == GenericOutputChoice::Auto && small)")],
             quick=["TuningOnDevice.GenericOutputKernelChosenByTheTable"]),
    Mutation("decode_softmax_subgroup_max",
             "softmax decode step (shaders/decode_softmax.comp, subgroup variant): the workgroup's maxima taken as minima",
             [P("shaders/decode_softmax.comp",
                "const float sub = subgroupMax(v[g]);",
                "const float sub = subgroupMin(v[g]);")],
             quick=["Kinds/SplitDecodeStep.MatchesForwardAcrossBlocksResetAndRestore/softmax_slice5"]),
    Mutation("state_block_boundary",
             "state passing (lib/decode): block boundaries counted from the call's start, not the sequence's",
             [P("lib/decode/polysketch_decoder.cpp",
                "const uint32_t p0 = local_ ? uint32_t(position % b_) : 0;",
                "const uint32_t p0 = 0;")],
             quick=["Polysketch/ChunksEqualWhole.RowsAndFinalState/local_degree8",
                    "Polysketch/ChunksEqualWhole.RowsAndFinalState/local_dv13"]),
    Mutation("coop_operand_rounding",
             "shaders/coopmat.glsl (emulated backend): CM_TO_OPERAND is the identity (no f16 / bf16 rounding)",
             [P("shaders/coopmat.glsl",
                "#define CM_TO_OPERAND(x) (CM_FOLDED ? (x) : cm_round_operand(x))",
                "#define CM_TO_OPERAND(x) (x)")],
             quick=["Types/CoopEmulationRounding.SoftmaxWeightsAreSixteenBitOperands/f16_tiled",
                    "Types/CoopEmulationRounding.SoftmaxWeightsAreSixteenBitOperands/bf16_tiled"]),
    Mutation("split_through_conversion",
             "cooperative output: phi(q)'s hi + lo split as x - float(CM_TO_OPERAND(x)), which a driver may fold to a zero low part",
             [P("shaders/polysketch_output_coopmat.comp",
                "        const float hi = CM_SPLIT_HIGH(x);",
                "        const float hi = float(CM_TO_OPERAND(x));")],
             quick=["coopmat_emulated_folded.Sweep"]),
    Mutation("row_groups_keep_fused_query",
             "output.sg_m: where the query side's pool leaves no tiling of that many row groups, the entry is ignored instead of reading the feature map's q rows",
             [P("lib/forward/polysketch_plan.cpp",
                "                c.FUSED_QUERY = c.QUERY_NORM = 0;",
                "                c.QUERY_NORM = c.QUERY_NORM;")],
             quick=["CoopMatCapabilitiesFromDeviceCaps.RowGroupsPlannedForAnH200",
                    "TuningOnDevice.CooperativeOutputRowGroupsWithoutRoomForTheQuerySide"]),
    Mutation("tuning_sibling_ignored",
             "tuning tables: a device with no table of its own never takes a sibling's (an H100 would run the model's choices the H200 measured 1.15-4.7x slower)",
             [P("lib/forward/tuning_table.cpp",
                "        if (sibling == id) return true;",
                "        if (sibling == id) return false;")],
             quick=["TuningTableSelection.AnH100TakesTheH200Table"]),
    Mutation("tune_order_enum",
             "psk tune: the walking block states searched first again (the order of the enum, which spent a GPU check's budget on a known loser)",
             [P("tools/psk/cmd_tune.cpp",
                "    TuningParameter::OutputSgM,          TuningParameter::OutputZPacked,     TuningParameter::PrefixPackMinGroups, TuningParameter::StatesSgM,",
                "    TuningParameter::StatesWalkMinGroups, TuningParameter::OutputZPacked,     TuningParameter::PrefixPackMinGroups, TuningParameter::StatesSgM,")],
             quick=["psk_tune_order"]),
    Mutation("shared_lone_word",
             "cooperative feature map: the tile's largest |x| a lone shared uint again (every pool after it 4 bytes off 16-byte alignment on NVIDIA)",
             [P("shaders/sketch_features_coopmat.comp",
                "shared uint x_max_bits[CM_SHARED_COUNT(1u, 4u)];",
                "shared uint x_max_bits[1];")],
             quick=["shader_lint"]),
    Mutation("workspace_overlap",
             "lib/forward/workspace.cpp: the second workspace region starts one alignment (256 B) before the first ends",
             [P("lib/forward/workspace.cpp",
                "p.bufferBytes[buffer] = endOf(offset, size);",
                "p.bufferBytes[buffer] = endOf(offset, i == 0 ? size - std::min<VkDeviceSize>(size, a) : size);")],
             quick=["ContextTest.SomeSequencesOfTheState",
                    "Sweep/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b32_causal_f16_bnhd_B2_Hq4_Hkv2_n53_h32_dv32"]),
    Mutation("baseline_diag",
             "baseline attention (attention_tiled.comp): causal mask drops the diagonal",
             [P("shaders/attention_tiled.comp",
                "if (CAUSAL) visible = row >= tile_start ? min(tile_len, row - tile_start + 1u) : 0u;",
                "if (CAUSAL) visible = row > tile_start ? min(tile_len, row - tile_start) : 0u;")],
             quick=["fp32_rows.Sweep/BaselineConformance.MatchesFloat64Reference/softmax_causal_f32_bhnd_B1_Hq2_Hkv1_n64_h64_dv64",
                    "fp32_rows.Sweep/BaselineConformance.MatchesFloat64Reference/poly4_causal_f16_bhnd_B2_Hq2_Hkv2_n50_h64_dv40_pad3"]),
    Mutation("baseline_diag_fp32",
             "baseline attention (FlashAttention-2 FP32 kernel): causal mask drops the diagonal",
             [P("shaders/attention_flash_fp32.comp",
                "const bool visible = key < key_end && (!CAUSAL || key <= params.q_pos + rows[i]);",
                "const bool visible = key < key_end && (!CAUSAL || key < params.q_pos + rows[i]);")],
             quick=["Sweep/BaselineConformance.MatchesFloat64Reference/softmax_causal_f32_bhnd_B1_Hq2_Hkv1_n64_h64_dv64",
                    "Sweep/BaselineConformance.MatchesFloat64Reference/poly4_causal_f16_bhnd_B2_Hq2_Hkv2_n50_h64_dv40_pad3"]),
    Mutation("softmax_cache_combine",
             "a softmax forward continuing the KV cache: the merge of the split keys reads split 0 alone",
             [P("shaders/attention_combine.comp",
                "    for (uint s = 0u; s < params.splits; ++s) {\n        const uint at",
                "    for (uint s = 0u; s < 1u; ++s) {\n        const uint at")],
             quick=["ContextTest.SoftmaxForwardContinuesTheCache"]),
    Mutation("staged_copy_drops_last",
             "staging (STAGED_COPY, staging.glsl): the last batch's last row of lanes (or its last element) is never stored",
             [P("shaders/staging.glsl",
                "(stage_u_ + 1u) * (STRIDE) <= stage_left_ || (stage_u_ * (STRIDE) < stage_left_ && i < (N)), STORE)",
                "(stage_u_ + 2u) * (STRIDE) <= stage_left_ || (stage_u_ * (STRIDE) < stage_left_ && i + 1u < (N)), STORE)")],
             quick=["generic_kernels.Sweep/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b48_causal_f32_bhnd_B1_Hq2_Hkv1_n243_h32_dv32",
                    "generic_output_tiles.Sweeps"]),
    Mutation("staged_max_underestimates",
             "staging (STAGED_ABS_MAX, staging.glsl): a range pass finds a sixteenth of the largest value (operands scaled past float16)",
             [P("shaders/staging.glsl",
                "stage_v_[stage_u_] = abs(VALUE);",
                "stage_v_[stage_u_] = abs(VALUE) * 0.0625;")],
             quick=["coopmat_gpu_tiles.GpuTiles16/PolysketchConformance.MatchesFloat64Reference/seed_p4_r16_b32_causal_f16_bhnd_B1_Hq2_Hkv1_n31_h16_dv24"]),
    Mutation("shader_replacement_ignored",
             "shader replacement (PSK_SHADER_REPLACE): the file is read but the built-in module is compiled",
             [P("lib/vk/pipelines.cpp",
                "                moduleInfo.codeSize = replaced->size() * 4u;\n                moduleInfo.pCode = replaced->data();",
                "                (void)moduleInfo;")],
             quick=["ShaderReplacement.AReplacementIsWhatRuns"]),
    Mutation("flash_fp32_row_max",
             "baseline attention (FlashAttention-2 FP32 kernel): each invocation rescales by its own keys' maximum, not its row's",
             [P("shaders/attention_flash_fp32.comp",
                "[[unroll]] for (uint gg = 0u; gg < KEY_GROUPS; ++gg) m_new = max(m_new, red_s[(rg + i * RG) * KEY_GROUPS + gg]);",
                "m_new = max(m_new, red_s[(rg + i * RG) * KEY_GROUPS + g]);")],
             quick=["Sweep/BaselineConformance.MatchesFloat64Reference/softmax_full_f32_bhnd_B1_Hq2_Hkv1_n300_h64_dv64",
                    "Fp32Table/FlashFp32Tilings.EntryMatchesFloat64Reference/tile4_softmax_full_bf16_bhnd_B1_Hq2_Hkv1_n150_h16_dv16"]),
    Mutation("baseline_diag_flash",
             "baseline attention (FlashAttention-2 cooperative kernel, emulated): causal mask drops the diagonal",
             [P("shaders/attention_flash_coopmat.comp",
                "if (CAUSAL) visible[rr] = valid && i >= ks ? min(klen, i - ks + 1u) : 0u;",
                "if (CAUSAL) visible[rr] = valid && i > ks ? min(klen, i - ks) : 0u;")],
             quick=["coopmat_emulated.Sweep/BaselineConformance.MatchesFloat64Reference/softmax_causal_f16_bhnd_B1_Hq4_Hkv4_n33_h16_dv80",
                    "coopmat_emulated.Sweep/BaselineConformance.MatchesFloat64Reference/poly2_causal_f16_bhnd_B1_Hq4_Hkv2_n77_h64_dv64"]),
    Mutation("flash_row_tiles",
             "FlashAttention-2 kernel with two row tiles per subgroup: every row tile's P V takes row tile 0's weights",
             [P("shaders/attention_flash_coopmat.comp",
                "o_acc[mt * NT + w] = CM_MULADD(pa[mt], vb, o_acc[mt * NT + w]);",
                "o_acc[mt * NT + w] = CM_MULADD(pa[0], vb, o_acc[mt * NT + w]);")],
             quick=["GpuTable/FlashTilings.EntryMatchesFloat64Reference/tile11_softmax_causal_f16_bhnd_B1_Hq2_Hkv1_n77_h16_dv16"]),
    Mutation("learned_tile_d2_chunk",
             "generic learned feature map, tiled: every hidden chunk's D2 rows taken from the first chunk",
             [P("shaders/sketch_features.comp",
                "W(d2 + min(u0 + i / SKETCH, HIDDEN - 1u) * SKETCH + i % SKETCH), u0 + i / SKETCH < HIDDEN,",
                "W(d2 + min(i / SKETCH, HIDDEN - 1u) * SKETCH + i % SKETCH), u0 + i / SKETCH < HIDDEN,")],
             quick=["generic_learned_tiled.Sweeps"]),
    Mutation("micro_coopmat_reload_shares_a",
             "psk micro's cooperative products: the reload form loads one A tile per step (the reuse form's loads), not each product's own",
             [P("shaders/micro_coopmat.comp",
                "const uint ta = (i + w) % TILES, tb = (i + 2u * w) % TILES;",
                "const uint ta = i % TILES, tb = (i + 2u * w) % TILES;")],
             quick=["psk_micro_quick"]),
    Mutation("feature_diag_accumulators_first_tile",
             "cooperative feature map, accumulators diagnostic: every column tile loads x's first tile of its chunk",
             [P("shaders/sketch_features_coopmat.comp",
                "CM_LOAD_ROW_ACC(acc, f_pool, F_X + sg_m * CM_M * HEAD_DIM + c0 + t * CM_N, HEAD_DIM);",
                "CM_LOAD_ROW_ACC(acc, f_pool, F_X + sg_m * CM_M * HEAD_DIM + c0, HEAD_DIM);")],
             quick=["Cases/FeatureMap16.SketchRowsOfTheRawKernelMatchReference/random_p4_r32_b32_h32_dv32_n150_causal_Hq2_Hkv1_B1_v20_f16_emulated_diag_accumulators"]),
    Mutation("feature_diag_operands_first_step",
             "cooperative feature map, operands diagnostic: every k step's A tile stored over the first step's",
             [P("shaders/sketch_features_coopmat.comp",
                "CM_STORE_ROW_A(ma, op_pool, OP_A + A_LO + sg_m * CM_M * LDA + kk, LDA);",
                "CM_STORE_ROW_A(ma, op_pool, OP_A + A_LO + sg_m * CM_M * LDA, LDA);")],
             quick=["Cases/FeatureMap16.SketchRowsOfTheRawKernelMatchReference/random_p4_r32_b32_h32_dv32_n150_causal_Hq2_Hkv1_B1_v20_f16_emulated_diag_operands"]),
    Mutation("micro_inflight_spec_one_chain",
             "psk micro's loads in flight: the specialized form loads chain 0's next line for every chain (one load in flight, not LOADS)",
             [P("shaders/micro_inflight.comp",
                "[[unroll]] for (uint k = 0u; k < LOADS; ++k) v[k] = chain[held[k]];",
                "[[unroll]] for (uint k = 0u; k < LOADS; ++k) v[k] = chain[held[0]];")],
             quick=["psk_micro_quick"]),
    Mutation("z_operands_no_lo",
             "z_operands.comp: the records' low operands written as zero (Z rounded once to 16 bits)",
             [P("shaders/z_operands.comp",
                "            lo[j] = pack_pair(x[0] - h[0], x[1] - h[1]);",
                "            lo[j] = 0u;")],
             quick=["Shapes/ZOperands.MatchesReferenceExactly/f16_s1_t1_causal_F136_chunk32_dv24_nc32"]),
    Mutation("z_packed_first_chunk_scale",
             "cooperative output, Z packed: every chunk's products unscaled with the block's first chunk's scale",
             [P("shaders/polysketch_output_coopmat.comp",
                "const float z_scale = Z_PACKED != 0u ? uintBitsToFloat(z_ops[z_chunk].x)",
                "const float z_scale = Z_PACKED != 0u ? uintBitsToFloat(z_ops[z_record].x)")],
             quick=["TuningOnDevice.ZOperandsPackedOrStagedFromTheTable"]),
    Mutation("z_walk_inclusive_prefix",
             "Z packed by the walk (WALK = 1): each block's record packs the prefix with the block's own sum added (Z_l + H_l)",
             [P("shaders/z_operands.comp",
                "        atomicMax(walk_max[block % 3u], floatBitsToUint(z_max));  // non-negative floats order as their bits",
                "        [[unroll]] for (uint k = 0u; k < 2u * UNITS; ++k) run[k] += h[k];\n"
                "        atomicMax(walk_max[block % 3u], floatBitsToUint(z_max));")],
             quick=["Walk/ZOperands.MatchesReferenceExactly/f16_s1_t7_causal_F136_chunk32_dv64_nc80_walk",
                    "TuningOnDevice.ZOperandsWalkFromTheTable"]),
    Mutation("z_walk_max_never_reset",
             "the packing walk's rotating shared maxima never reset: a block's scale is the largest |Z| of it and of every third block before",
             [P("shaders/z_operands.comp",
                "            walk_max[(block + 2u) % 3u] = 0u;",
                "            // (not reset)")],
             quick=["Walk/ZOperands.MatchesReferenceExactly/f16_s2_t9_causal_F136_chunk32_dv64_nc80_alternating_walk"]),
    Mutation("z_walk_never_recorded",
             "the packing walk never recorded (the scan and the packing kernel always run): the forward stays right, only the bytes grow",
             [P("lib/forward/polysketch_forward.cpp",
                "    const bool packWalk = !walk && c.causal && !cont && res.zOperandsWalk",
                "    const bool packWalk = false && !walk && c.causal && !cont && res.zOperandsWalk")],
             quick=["ContextTest.PackingWalkLeavesTheBlockStatesAndSkipsTheScan"]),
    Mutation("z_walk_with_a_state",
             "the packing walk also for a forward continuing a decode state (its initial prefix dropped)",
             [P("lib/forward/polysketch_forward.cpp",
                "    const bool packWalk = !walk && c.causal && !cont && res.zOperandsWalk",
                "    const bool packWalk = !walk && c.causal && res.zOperandsWalk")],
             quick=["coopmat_emulated_walk.StatePassing"]),
    Mutation("z_staged_normalizer_column",
             "cooperative output, Z staged: the Z chunk's normalizer column staged from value column dv - 1",
             [P("shaders/polysketch_output_coopmat.comp",
                "* Z_STRIDE + min(c, VALUE_DIM)] * z_scale;  // branch-free",
                "* Z_STRIDE + min(c, VALUE_DIM - 1u)] * z_scale;  // branch-free")],
             quick=["coopmat_gpu_tiles_z_staged.GpuTiles16"]),
    Mutation("softmax_cache_ignores_table",
             "a softmax forward continuing the KV cache: the model's FP32 tiling, whatever the table's baselines.fp32_tile",
             [P("lib/decode/softmax_decoder.cpp",
                "    if (std::optional<kernel::AttentionFlashFp32Spec> tuned = tunedFlashFp32Spec(c, caps, tuning)) return tuned;\n",
                "")],
             quick=["ContextTest.SoftmaxForwardContinuesTheCacheOnTheTablesTiling"]),
    Mutation("tiled_output_spec_bound_loop",
             "register-tiled generic output: the phi(q)^T Z accumulation's loop bounded by the specialization constant again (not unrolled at build time: acc left an array)",
             [P("shaders/polysketch_output.comp",
                "                [[unroll]] for (uint i = 0u; i < 4u * MAX_COL_VEC4; ++i)\n                    if (i / 4u < COL_VEC4) acc[i] += phi[i % 4u] * cols[i / 4u];",
                "                [[unroll]] for (uint i = 0u; i < 4u * COL_VEC4; ++i)\n                    acc[i] += phi[i % 4u] * cols[i / 4u];")],
             quick=["ShaderRegistry.TheTiledOutputsRegisterTilesAreNoArrays"]),
    Mutation("staged_copy_guarded_stores",
             "staging: the whole batches' stores under `if (i < N)` again (the compiler sinks each load to its store: one in flight)",
             [P("shaders/staging.glsl",
                "LOAD, KEEP, true, STORE)",
                "LOAD, KEEP, i < (N), STORE)")],
             quick=["psk_compile"]),
    Mutation("staged_copy_rolled_skips",
             "staging: the rolled whole batches (STAGE_ROLLED, generic.stage_rolled 1) step two batches at a time (every other batch never staged)",
             [P("shaders/staging.glsl",
                "[[dont_unroll]] for (; stage_i0_ < stage_whole_; stage_i0_ += STAGE_BATCH * (STRIDE))",
                "[[dont_unroll]] for (; stage_i0_ < stage_whole_; stage_i0_ += 2u * STAGE_BATCH * (STRIDE))")],
             quick=["generic_output_rows_rolled.Sweeps"]),
    Mutation("rows_ablation_local_ignored",
             "generic row output: PSK_ABLATE's output.local does not reach the local part (a timing would charge the local part nothing)",
             [P("shaders/polysketch_output_rows.comp",
                "if (CAUSAL && (ABLATE & 2u) == 0u) {",
                "if (CAUSAL) {")],
             quick=["GenericAblations.EachPartLeftOutChangesTheOutputWhereItShould"]),
]


def log(msg: str) -> None:
    print(msg, flush=True)


def run(cmd: List[str], cwd: Optional[Path] = None, env=None, logfile: Optional[Path] = None, check: bool = True) -> int:
    if logfile:
        with open(logfile, "ab") as f:
            f.write(("$ " + " ".join(cmd) + "\n").encode())
            f.flush()
            rc = subprocess.call(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT)
    else:
        rc = subprocess.call(cmd, cwd=cwd, env=env)
    if check and rc != 0:
        raise RuntimeError(f"command failed ({rc}): {' '.join(cmd)}" + (f" (log: {logfile})" if logfile else ""))
    return rc


def anchor_status(src: Path, m: Mutation) -> Optional[str]:
    """None when every patch of m applies to the tree at src, else why not."""
    for p in m.patches:
        f = src / p.path
        if not f.exists():
            return f"{p.path}: file not found"
        n = f.read_text().count(p.old)
        if n != 1:
            return f"{p.path}: anchor {'not found' if n == 0 else f'found {n} times'}: {p.old!r}"
    return None


def apply(src: Path, m: Mutation) -> Dict[Path, str]:
    originals: Dict[Path, str] = {}
    for p in m.patches:
        f = src / p.path
        text = originals.get(f, f.read_text())
        originals.setdefault(f, text)
        cur = f.read_text()
        f.write_text(cur.replace(p.old, p.new, 1))
    return originals


def restore(originals: Dict[Path, str]) -> None:
    for f, text in originals.items():
        f.write_text(text)


def cmake_regex_escape(s: str) -> str:
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", s)


def norm(name: str) -> str:
    """A test's name without the comment CTest keeps from gtest_discover_tests for value-parameterized
    tests ("  # GetParam() = 60-byte object <...>"): its bytes include pointers, so they change from
    one discovery (one link) to the next."""
    return name.split("  #", 1)[0]


def ctest_regex(names: List[str]) -> str:
    return "^(" + "|".join(cmake_regex_escape(n) for n in names) + ")(  #.*)?$"


class Checker:
    def __init__(self, args):
        self.args = args
        self.work = Path(args.work).resolve()
        self.src = self.work / "src"
        self.build = self.work / "build"
        self.logs = self.work / "logs"
        self.env = dict(os.environ, PSK_REQUIRE_VALIDATION="1")
        self.tests: Dict[str, dict] = {}  # ctest name -> {"exe": basename, "target": target or None}

    # ---- setup ----
    def setup(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        rev = subprocess.check_output(["git", "-C", str(ROOT), "rev-parse", self.args.rev], text=True).strip()
        if (self.src / ".git").exists():
            # A kept worktree (--keep): move it to rev; only changed files get new times.
            run(["git", "-C", str(self.src), "checkout", "--quiet", "--force", "--detach", rev], logfile=self.logs / "setup.log")
        else:
            if self.src.exists():
                raise RuntimeError(f"{self.src} exists and is not a worktree; remove it or pick another --work")
            # A worktree whose folder went away (a deleted build folder) is still registered: prune first.
            run(["git", "-C", str(ROOT), "worktree", "prune"], logfile=self.logs / "setup.log")
            run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(self.src), rev], logfile=self.logs / "setup.log")
        venv = ROOT / ".venv-build"  # the second shader compiler (KHR variants), gitignored
        if venv.exists() and not (self.src / ".venv-build").exists():
            (self.src / ".venv-build").symlink_to(venv)
        if subprocess.call(["git", "-C", str(self.src), "diff", "--quiet"]) != 0:
            raise RuntimeError(f"worktree {self.src} is not clean")
        self.rev = rev
        log(f"worktree {self.src} at {rev[:12]}; build folder {self.build}")
        if not (self.build / "CMakeCache.txt").exists():
            gen = ["-G", "Ninja"] if shutil.which("ninja") else []
            run(["cmake", "-S", str(self.src), "-B", str(self.build), *gen, f"-DCMAKE_BUILD_TYPE={self.args.build_type}"],
                logfile=self.logs / "configure.log")

    def teardown(self) -> None:
        if self.args.keep:
            log(f"kept {self.work} (worktree and build folder) for the next --work {self.work} --keep run")
            return
        subprocess.call(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(self.src)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.work, ignore_errors=True)
        subprocess.call(["git", "-C", str(ROOT), "worktree", "prune"])

    def build_targets(self, targets: Optional[List[str]], logname: str) -> bool:
        cmd = ["cmake", "--build", str(self.build), "-j", str(self.args.jobs)]
        if targets:
            cmd += ["--target", *targets]
        return run(cmd, logfile=self.logs / logname, check=False) == 0

    def load_tests(self) -> None:
        out = subprocess.check_output(["ctest", "--show-only=json-v1"], cwd=self.build, env=self.env, text=True)
        data = json.loads(out)
        for t in data.get("tests", []):
            cmd = t.get("command") or []
            labels = []
            for p in t.get("properties", []):
                if p.get("name") == "LABELS":
                    labels = p.get("value", [])
            exe = Path(cmd[0]).name if cmd else ""
            target = None
            if cmd and Path(cmd[0]).resolve().is_relative_to(self.build.resolve()):
                target = exe
            self.tests[norm(t["name"])] = {"exe": exe, "target": target, "labels": labels}

    # ---- tests ----
    def run_tests(self, names: Optional[List[str]], tag: str, exclude: Optional[Set[str]] = None) -> Tuple[Set[str], Dict[str, float], float]:
        """Runs the given tests (None: the default set) but `exclude`; returns (failed, durations, seconds),
        names normalized (norm)."""
        junit = self.logs / f"{tag}.xml"
        if junit.exists():
            junit.unlink()
        # The default set is tools/run_tests.sh's: without this check and without the per-case tests
        # of the sharded sweeps (label `cases`, the same cases as the shards); named tests may be either.
        excluded = f"^{MUTATION_LABEL}$" if names is not None else f"^({MUTATION_LABEL}|{CASES_LABEL})$"
        cmd = ["ctest", "-j", str(self.args.jobs), "--timeout", str(self.args.timeout), "--output-junit", str(junit),
               "-LE", excluded]
        if names is not None:
            names = [n for n in names if not exclude or n not in exclude]
            cmd += ["-R", ctest_regex(names)]
        elif exclude:
            cmd += ["-E", ctest_regex(sorted(exclude))]
        t0 = time.time()
        run(cmd, cwd=self.build, env=self.env, logfile=self.logs / f"{tag}.log", check=False)
        seconds = time.time() - t0
        failed: Set[str] = set()
        durations: Dict[str, float] = {}
        if not junit.exists():
            raise RuntimeError(f"ctest wrote no {junit} (log: {self.logs / (tag + '.log')})")
        for tc in ET.parse(junit).getroot().iter("testcase"):
            name = norm(tc.get("name"))
            durations[name] = float(tc.get("time") or 0)
            status = tc.get("status", "")
            if status in ("fail", "notrun") or tc.find("failure") is not None or tc.find("error") is not None:
                if status != "disabled":
                    failed.add(name)
        if names is not None:
            missing = set(names) - set(durations)
            failed |= missing  # asked for but not run: counted as failing, and reported
        return failed, durations, seconds

    def resolve(self, entry: str) -> List[str]:
        """The tests a quick-list entry names: itself (a name as norm() gives it), or with --tests the
        tests whose names match that Python regular expression."""
        return [entry] if entry in self.tests else []

    def missing_quick(self, m: Mutation) -> List[str]:
        return [e for e in m.quick if not self.resolve(e)]

    def selection(self, m: Optional[Mutation]) -> Optional[List[str]]:
        if self.args.tests:
            pat = re.compile(self.args.tests)
            return sorted(n for n in self.tests if pat.search(n))
        if not self.args.quick:
            return None
        ms = self.selected if m is None else [m]
        return sorted({n for mm in ms for e in mm.quick for n in self.resolve(e)})

    def targets_for(self, names: Optional[List[str]]) -> Optional[List[str]]:
        if names is None:
            return None  # all
        targets = sorted({self.tests[n]["target"] for n in names if n in self.tests and self.tests[n]["target"]})
        return targets or None


def summarize(names: List[str], tests: Dict[str, dict], limit: int) -> str:
    """Failed tests per executable, and up to `limit` names taken in turn from each executable."""
    by_exe: Dict[str, List[str]] = {}
    for n in sorted(names):
        exe = tests.get(n, {}).get("exe") or n
        if exe in ("sh", "bash", "cmake", "python3", "mpiexec", "mpirun"):
            exe = n
        by_exe.setdefault(exe, []).append(n)
    order = sorted(by_exe.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    groups = ", ".join(f"{k} {len(v)}" for k, v in order)
    shown: List[str] = []
    for i in range(max(len(v) for _, v in order)):
        shown += [v[i] for _, v in order if i < len(v)]
    more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
    return f"[{groups}] e.g. {', '.join(shown[:limit])}{more}"


def _interrupt(signum, frame):
    raise KeyboardInterrupt()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="per mutation, only its listed tests (known to catch it)")
    ap.add_argument("--only", default="", help="comma-separated mutation names (default: all)")
    ap.add_argument("--tests", default="", metavar="REGEX",
                    help="per mutation, the tests whose names match this Python regex (to find a mutation's catchers)")
    ap.add_argument("--list", action="store_true", help="list the mutations and check their anchors against --rev; build nothing")
    ap.add_argument("--rev", default="HEAD", help="the commit to mutate (default HEAD)")
    ap.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "psk-mutation"),
                    help="scratch folder: worktree src/, build/, logs/ (default $TMPDIR/psk-mutation)")
    ap.add_argument("--keep", action="store_true", help="keep the worktree and build folder for an incremental next run")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="build and ctest parallelism (default: nproc)")
    ap.add_argument("--timeout", type=int, default=600, help="per-test timeout in seconds (default 600)")
    ap.add_argument("--build-type", default="Release")
    ap.add_argument("--baseline", default="", metavar="JUNIT",
                    help="take the unmutated tree's failures from this ctest --output-junit file of the same commit "
                         "(e.g. logs/tests-baseline.xml of an earlier run) instead of running the baseline")
    ap.add_argument("--report", default="", help="also write the results as JSON to this file")
    ap.add_argument("--names", type=int, default=4, help="test names shown per mutation in the table (default 4)")
    args = ap.parse_args()

    selected = MUTATIONS
    if args.only:
        want = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [w for w in want if w not in {m.name for m in MUTATIONS}]
        if unknown:
            print(f"unknown mutation(s): {', '.join(unknown)}", file=sys.stderr)
            return 2
        selected = [m for m in MUTATIONS if m.name in want]

    if args.list:
        rc = 0
        for m in selected:
            # Anchors checked against the committed file at --rev (git show), not the working tree.
            bad = None
            for p in m.patches:
                try:
                    text = subprocess.check_output(["git", "-C", str(ROOT), "show", f"{args.rev}:{p.path}"], text=True,
                                                   stderr=subprocess.DEVNULL)
                except subprocess.CalledProcessError:
                    bad = f"{p.path}: not in {args.rev}"
                    break
                n = text.count(p.old)
                if n != 1:
                    bad = f"{p.path}: anchor {'not found' if n == 0 else f'found {n} times'}"
                    break
            rc |= bad is not None
            print(f"{m.name:24} {'STALE: ' + bad if bad else 'ok'}\n{'':24} {m.what}\n{'':24} quick: {', '.join(m.quick) or '-'}")
        return 1 if rc else 0

    if args.quick and not args.tests:
        empty = [m.name for m in selected if not m.quick]
        if empty:
            print(f"--quick: no quick tests listed for {', '.join(empty)}", file=sys.stderr)
            return 2

    # SIGTERM (a CI timeout) as ^C: the planted bug is taken out again before exiting.
    signal.signal(signal.SIGTERM, _interrupt)
    ck = Checker(args)
    ck.selected = selected
    t_start = time.time()
    results = []
    status = 0
    baseline_failed: Set[str] = set()
    missing_quick: List[str] = []
    try:
        ck.setup()
        stale = {m.name: anchor_status(ck.src, m) for m in selected}
        log("building the unmutated tree ...")
        t0 = time.time()
        if not ck.build_targets(None, "build-baseline.log"):
            raise RuntimeError(f"the unmutated tree does not build (log: {ck.logs / 'build-baseline.log'})")
        log(f"  built in {time.time() - t0:.0f} s")
        ck.load_tests()
        missing_quick = sorted({t for m in selected for t in ck.missing_quick(m)}) if args.quick and not args.tests else []
        base_sel = ck.selection(None)
        if args.baseline:
            failed = set()
            for tc in ET.parse(args.baseline).getroot().iter("testcase"):
                if tc.get("status") in ("fail", "notrun") or tc.find("failure") is not None:
                    failed.add(norm(tc.get("name")))
            log(f"baseline: the failures recorded in {args.baseline}: {len(failed)}")
        else:
            log(f"baseline: {'%d tests' % len(base_sel) if base_sel is not None else 'the default test set'} ...")
            failed, durations, secs = ck.run_tests(base_sel, "tests-baseline")
            log(f"  {len(durations)} tests in {secs:.0f} s, {len(failed)} failed")
        baseline_failed = failed
        if failed:
            # Failing before any mutation: they cannot tell a mutation apart, so they are left out of
            # every run below (and named in the table); the default CI run reports them itself.
            log("WARNING: tests failing without any mutation, left out:\n  " + "\n  ".join(sorted(failed)))

        for m in selected:
            row = {"name": m.name, "what": m.what}
            results.append(row)
            if stale[m.name]:
                row.update(result="STALE", detail=stale[m.name], caught_by=[])
                log(f"[{m.name}] STALE: {stale[m.name]}")
                continue
            names = ck.selection(m)
            if names is not None and not args.tests:
                gone = ck.missing_quick(m)
                if gone:
                    row.update(result="STALE", detail="quick test(s) no longer exist: " + ", ".join(gone), caught_by=[])
                    log(f"[{m.name}] STALE quick list: {', '.join(gone)}")
                    continue
            log(f"[{m.name}] {m.what}")
            t0 = time.time()
            originals = apply(ck.src, m)
            try:
                built = ck.build_targets(ck.targets_for(names), f"build-{m.name}.log")
                t_build = time.time() - t0
                if not built:
                    row.update(result="BUILD", detail=f"does not build (log: {ck.logs / ('build-' + m.name + '.log')})",
                               caught_by=[], build_s=round(t_build, 1))
                    log(f"  BUILD FAILED after {t_build:.0f} s")
                    continue
                failed, durations, secs = ck.run_tests(names, f"tests-{m.name}", exclude=baseline_failed)
            finally:
                restore(originals)
            caught = sorted(failed)
            row.update(result="caught" if caught else "SURVIVED", caught_by=caught, tests_run=len(durations),
                       build_s=round(t_build, 1), test_s=round(secs, 1))
            log(f"  {row['result']}: {len(caught)} of {len(durations)} tests failed (build {t_build:.0f} s, tests {secs:.0f} s)")
        if subprocess.call(["git", "-C", str(ck.src), "diff", "--quiet"]) != 0:
            log("warning: the worktree is not clean after restoring")
            status = 2
    except RuntimeError as e:
        print(f"mutation_check: {e}", file=sys.stderr)
        ck.teardown()
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        ck.teardown()
        return 2

    total = time.time() - t_start
    mode = "tests~" + args.tests if args.tests else "quick" if args.quick else "full"
    print()
    print(f"Mutation check ({mode}, {ck.rev[:12]}, {total / 60:.1f} min)")
    w = max(len(r["name"]) for r in results) if results else 10
    print(f"{'mutation':{w}}  {'result':8}  {'caught':>6}  caught by")
    for r in results:
        n = len(r.get("caught_by", []))
        by = summarize(r["caught_by"], ck.tests, args.names) if n else r.get("detail", "-")
        if r.get("tests_run") is not None and n:
            by = f"{n}/{r['tests_run']} {by}"
        print(f"{r['name']:{w}}  {r['result']:8}  {n:6}  {by}")
    bad = [r for r in results if r["result"] != "caught"]
    if baseline_failed:
        print("left out (failing without any mutation): " + ", ".join(sorted(baseline_failed)))
    if missing_quick:
        print("quick tests that no longer exist: " + ", ".join(missing_quick))
    if args.report:
        Path(args.report).write_text(json.dumps({"rev": ck.rev, "mode": mode, "minutes": round(total / 60, 1),
                                                 "baseline_failed": sorted(baseline_failed), "results": results},
                                                indent=1) + "\n")
    ck.teardown()
    if bad or missing_quick:
        print(f"FAIL: {len(bad)} mutation(s) not caught: " + ", ".join(f"{r['name']} ({r['result']})" for r in bad))
        return max(status, 1)
    print(f"OK: all {len(results)} mutations caught")
    return status


if __name__ == "__main__":
    sys.exit(main())
