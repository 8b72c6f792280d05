"""Training frameworks above torch: Lightning, Hugging Face Trainer, Megatron-LM, DeepSpeed,
and the fp16 loss scalers of DeepSpeed, apex and fairseq."""

from __future__ import annotations

from diag.analyze.catalog.spec import Example, Signature, Source, compute, const, group, search

ENTRIES = (
    Signature(
        id="lightning.fit_stopped", signal="training_end", oneof="training_end",
        prefilter=(("stopped", "raining"),),
        pattern=r"fit` stopped|max_(?:epochs|steps)=\S+`? reached",
        source=Source("Lightning-AI/pytorch-lightning", "src/lightning/pytorch/loops/fit_loop.py",
                      "_FitLoop.done"),
        examples=(Example("`Trainer.fit` stopped: `max_epochs=10` reached."),),
        near_misses=("early stopping patience 3",)),
    Signature(
        id="transformers.training_completed", signal="training_end", oneof="training_end",
        prefilter=("raining",),
        pattern=r"[Tt]raining (?:is )?(?:completed?|finished|done)\b|[Ff]inished training"
                r"|[Tt]raining ended",
        source=Source("huggingface/transformers", "src/transformers/trainer.py",
                      "Trainer._inner_training_loop",
                      "'Training completed. Do not forget to share your model' (older releases: "
                      "Trainer.train); other trainers say 'Finished training' or 'Training "
                      "finished'"),
        examples=(Example("Training completed. Do not forget to share your model on "
                          "huggingface.co/models =)"),
                  Example("[INFO] Finished training in 3h 12m")),
        near_misses=("Training complete_step 3",)),
    Signature(
        id="lightning.distributed_member", signal="world_size", prefilter=("MEMBER:",),
        pattern=r"GLOBAL_RANK: (?P<rank>\d+), MEMBER: (?P<m>\d+)/(?P<n>\d+)",
        fields={"rank": int, "n": int, "source": const("lightning")},
        source=Source("Lightning-AI/pytorch-lightning",
                      "src/lightning/fabric/utilities/distributed.py", "_init_dist_connection"),
        examples=(Example("Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/3",
                          {"rank": 1, "n": 3}),),
        near_misses=("MEMBER: 2",)),
    Signature(
        id="megatron.straggler_report", signal="straggler_report", prefilter=("MxRtt",),
        pattern=r"MnRtt/Rnk: (?P<min_ms>[\d.]+)ms/(?P<min_rank>\d+) \| "
                r"MxRtt/Rnk: (?P<max_ms>[\d.]+)ms/(?P<max_rank>\d+)",
        fields={"min_ms": float, "min_rank": int, "max_ms": float, "max_rank": int},
        source=Source("NVIDIA/Megatron-LM", "megatron/core/utils.py", "StragglerDetector.report"),
        examples=(Example(" 0: INFO:megatron.core.utils:[2024-03-14 23:07:56] | MnRtt/Rnk: "
                          "3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0 | MnPwr/Rnk: 601796W/8",
                          {"min_ms": 3453.08, "min_rank": 8, "max_ms": 3468.2, "max_rank": 0}),),
        near_misses=("MxRtt/Rnk: n/a",)),
    Signature(
        id="deepspeed.comm_op", signal="comm_timing", prefilter=("comm op:",),
        pattern=r"(?:rank=(?P<rank>\d+) \| )?comm op: (?P<op>\w+) \| time \(ms\): (?P<ms>[\d.]+)"
                r".*?busbw \(Gbps\): (?P<busbw_gbps>[\d.]+)",
        fields={"rank": int, "op": str, "ms": float, "busbw_gbps": float},
        source=Source("deepspeedai/DeepSpeed", "deepspeed/utils/comms_logging.py",
                      "CommsLogger.append",
                      "before 0.10: 'rank=N | comm op: ...'; since, log_dist's '[Rank N] comm op'"),
        examples=(Example("rank=0 | comm op: reduce_scatter_base | time (ms): 9.46 | msg size: "
                          "100.0 MB | algbw (Gbps): 1000.00 | busbw (Gbps): 1129.23",
                          {"rank": 0, "op": "reduce_scatter_base", "ms": 9.46,
                           "busbw_gbps": 1129.23}),
                  Example("[Rank 3] comm op: all_reduce | time (ms): 2.50 | msg size: 8.0 MB | "
                          "algbw (Gbps): 26.84 | busbw (Gbps): 50.32",
                          {"rank": 3, "op": "all_reduce", "busbw_gbps": 50.32})),
        near_misses=("comm op: all_reduce",)),
)

DEEPSPEED = "deepspeedai/DeepSpeed"
MEGATRON = "NVIDIA/Megatron-LM"
_SCALE = r"[\d.]+(?:e[-+]?\d+)?"

# fp16 dynamic loss scaling: an overflow skips the step and halves the scale. A few are the
# scaler calibrating and are normal; a scale driven down to 1 and below means the gradients
# themselves are not finite (detectors/nan.py reads the series).
LOSS_SCALE = (
    Signature(
        id="deepspeed.overflow_skip", signal="loss_scale_overflow",
        prefilter=(("OVERFLOW!", "overflow!", "Overflow detected"), "Skipping step"),
        pattern=r"(?:OVERFLOW!|overflow!|Overflow detected\.)(?: Rank \d+)? Skipping step\.?"
                r"(?: Attempted loss scale: (?P<scale>" + _SCALE + r")"
                r"(?:, reducing to (?P<next>" + _SCALE + r"))?)?",
        fields={"scale": group("scale", float), "next": group("next", float),
                "framework": const("deepspeed")},
        source=Source(DEEPSPEED, "deepspeed/runtime/fp16/loss_scaler.py",
                      "DynamicLossScaler.update_scale",
                      "'[deepspeed] OVERFLOW! Rank %d Skipping step. Attempted loss scale: %d, "
                      "reducing to %d' (or ', but hysteresis is %d. Reducing hysteresis to %d'); "
                      "printed by rank 0 only, for every rank"),
        also=(Source(DEEPSPEED, "deepspeed/runtime/fp16/fused_optimizer.py", "FP16_Optimizer.step",
                     "'Overflow detected. Skipping step. Attempted loss scale: %s, reducing to "
                     "%s'; ZeRO-1/2 before 0.4: '[deepspeed] fp16 dynamic loss scale overflow! "
                     "Rank %d Skipping step. ...'"),),
        examples=(Example("[2025-03-02 10:41:07,338] [INFO] [loss_scaler.py:183:update_scale] "
                          "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
                          "65536, reducing to 32768", {"scale": 65536.0, "next": 32768.0}),
                  Example("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
                          "1024, but hysteresis is 2. Reducing hysteresis to 1",
                          {"scale": 1024.0, "next": None}),
                  Example("[deepspeed] fp16 dynamic loss scale overflow! Rank 0 Skipping step. "
                          "Attempted loss scale: 2.0, reducing to 1.0", {"next": 1.0})),
        near_misses=("[deepspeed] OVERFLOW! checks are disabled for bf16; not skipping",)),
    Signature(
        id="apex.gradient_overflow", signal="loss_scale_overflow",
        prefilter=("Gradient overflow.",),
        pattern=r"Gradient overflow\.\s+Skipping step, (?:loss scaler \d+ )?reducing loss scale "
                r"to (?P<next>" + _SCALE + r")",
        fields={"scale": const(None), "next": group("next", float), "framework": const("apex")},
        source=Source("NVIDIA/apex", "apex/amp/handle.py", "scale_loss",
                      "'Gradient overflow.  Skipping step, loss scaler %d reducing loss scale to "
                      "%s' with the new scale; without a min_loss_scale it keeps halving below 1"),
        examples=(Example("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale "
                          "to 16384.0", {"next": 16384.0}),
                  Example("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale "
                          "to 1.52587890625e-05", {"next": 1.52587890625e-05})),
        near_misses=("Gradient overflow. Checking scale",)),
    Signature(
        id="fairseq.gradient_overflow", signal="loss_scale_overflow",
        prefilter=("gradient overflow detected",),
        pattern=r"gradient overflow detected, ignoring gradient, setting loss scale to: "
                r"(?P<next>" + _SCALE + r")",
        fields={"scale": const(None), "next": group("next", float), "framework": const("fairseq")},
        source=Source("facebookresearch/fairseq", "fairseq/trainer.py", "Trainer.train_step",
                      "'NOTE: gradient overflow detected, ignoring gradient, %s' with the "
                      "OverflowError of fairseq/optim/dynamic_loss_scaler.py check_overflow"),
        examples=(Example("2024-05-11 08:02:13 | INFO | fairseq.trainer | NOTE: gradient overflow "
                          "detected, ignoring gradient, setting loss scale to: 32.0",
                          {"next": 32.0}),),
        near_misses=("no gradient overflow detected in 1000 updates",)),
)

MEGATRON_NAN = (
    # training_log's interval line, printed by the last rank only: "number of nan iterations"
    # counts the iterations of the interval whose loss was NaN or Inf (any rank's).
    Signature(
        id="megatron.nan_iterations", signal="nan_iterations",
        prefilter=("number of nan iterations:",),
        pattern=r"number of nan iterations:\s*(?P<count>[1-9]\d*)",
        fields={"count": int, "step": search(r"\biteration\s+(\d+)\s*/", int),
                "skipped": search(r"number of skipped iterations:\s*(\d+)", int)},
        source=Source(MEGATRON, "megatron/training/training.py", "training_log",
                      "' number of nan iterations: {:3d} |' after ' iteration {:8d}/{:8d} |'; "
                      "before 0.6: megatron/training.py"),
        examples=(Example(" [2025-01-09 17:22:31] iteration     1200/  500000 | consumed samples: "
                          "     153600 | elapsed time per iteration (ms): 812.4 | learning rate: "
                          "2.999E-04 | global batch size:   128 | loss scale: 1.0 | number of "
                          "skipped iterations:  10 | number of nan iterations:  10 |",
                          {"count": 10, "step": 1200, "skipped": 10}),),
        near_misses=(" iteration      300/  500000 | lm loss: 6.412E+00 | number of skipped "
                     "iterations:   0 | number of nan iterations:   0 |",)),
    # fp16's skipped iterations (overflows) with the scale they left: skips at a scale of 1
    # are gradients that overflow unscaled (bf16 runs skip nothing: no scaler)
    Signature(
        id="megatron.skipped_iterations", signal="loss_scale_overflow",
        prefilter=("number of skipped iterations:", "loss scale:"),
        pattern=r"loss scale: (?P<scale>" + _SCALE + r") \|.*?number of skipped iterations:"
                r"\s*(?P<count>[1-9]\d*)",
        fields={"scale": float, "next": const(None), "count": int,
                "framework": const("megatron")},
        source=Source(MEGATRON, "megatron/training/training.py", "training_log",
                      "' loss scale: {:.1f} |' ... ' number of skipped iterations: {:3d} |'"),
        examples=(Example(" iteration      500/  100000 | lm loss: 7.114E+00 | loss scale: 1.0 | "
                          "grad norm: 0.931 | number of skipped iterations:  12 | number of nan "
                          "iterations:   0 |", {"scale": 1.0, "count": 12}),),
        near_misses=(" iteration      500/  100000 | loss scale: 32768.0 | number of skipped "
                     "iterations:   0 | number of nan iterations:   0 |",)),
    # --check-for-nan-in-loss-and-grad: the rank whose own gradients or loss went non-finite,
    # before the data-parallel reduction spreads the NaN to everyone.
    Signature(
        id="megatron.grad_norm_nan", signal="nan_loss", prefilter=("in local grad norm",),
        pattern=r"Rank (?P<rank>\d+): found (?P<value>NaN|Inf) in local grad norm",
        fields={"rank": int, "value": str.lower, "metric": const("grad norm"),
                "step": const(None)},
        source=Source(MEGATRON, "megatron/core/distributed/param_and_grad_buffer.py",
                      "Bucket.start_grad_sync",
                      "'Rank {global_rank}: found NaN in local grad norm in backward pass before "
                      "data-parallel communication collective. Device: %d, node: %s' (core "
                      "0.4-0.9; since, the rerun state machine's wording)"),
        examples=(Example("AssertionError: Rank 13: found NaN in local grad norm in backward pass "
                          "before data-parallel communication collective. Device: 5, node: "
                          "gpu-node-0412", {"rank": 13, "value": "nan"}),),
        near_misses=("Rank 13: found no NaN in local grad norm",)),
    Signature(
        id="megatron.rerun_unexpected_result", signal="nan_loss",
        prefilter=("Unexpected result", ("found NaN", "found Inf")),
        pattern=r"Rank (?P<rank>\d+), node \S+, device \d+, iteration #?(?P<step>\d+): "
                r"Unexpected result"
                r"|Unexpected result .{0,80}? on rank (?P<rank_b>\d+) "
                r"at iteration #(?P<step_b>\d+)",
        fields={"rank": compute(lambda m: int(m.group("rank") or m.group("rank_b"))),
                "step": compute(lambda m: int(m.group("step") or m.group("step_b"))),
                "value": compute(lambda m: "inf" if "found Inf" in m.string else "nan"),
                "metric": compute(lambda m: "loss" if "forward loss" in m.string
                                  else "grad norm")},
        source=Source(MEGATRON, "megatron/core/rerun_state_machine.py",
                      "RerunStateMachine.validate_result",
                      "reruns disabled: 'Rank %d, node %s, device %d, iteration %d: Unexpected "
                      "result %s (message='%s')'; enabled: 'Unexpected result %s on rank %d at "
                      "iteration #%d invocation #%d (message='%s')'; the messages are "
                      "'found NaN in local grad norm for bucket #%d ...' "
                      "(param_and_grad_buffer.py check_grads) and 'found NaN in local forward "
                      "loss calculation' (pretrain_gpt.py loss_func)"),
        examples=(Example("RuntimeError: Rank 6, node dgx-b07, device 6, iteration 8812: "
                          "Unexpected result nan (message='found NaN in local grad norm for "
                          "bucket #0 in backward pass before data-parallel communication "
                          "collective')", {"rank": 6, "step": 8812, "value": "nan",
                                           "metric": "grad norm"}),
                  Example("Unexpected result tensor(inf, device='cuda:2') on rank 10 at "
                          "iteration #377 invocation #1 (message='found Inf in local forward "
                          "loss calculation')", {"rank": 10, "step": 377, "value": "inf",
                                                 "metric": "loss"})),
        near_misses=("Unexpected result 812.5 on rank 3 at iteration #12 invocation #1 "
                     "(message='found unexpected large grads in bucket #0')",)),
)

# DeepSpeed's launcher (the `deepspeed` command) when a worker exits non-zero: its return
# code is the failing worker's, but the command it quotes is the LAST worker's it spawned
# (its "--local_rank=N" names no one). -9 is a SIGKILL, most often the OOM killer's.
LAUNCHER = (
    Signature(
        id="deepspeed.launcher_sigkill", signal="oom", oneof="oom",
        prefilter=("exits with return code = -9",),
        pattern=r"exits with return code = -9\b",
        fields={"device": const("host"), "weak": const(True), "tried": const(None),
                "gpu": const(None)},
        source=Source(DEEPSPEED, "deepspeed/launcher/launch.py", "sigkill_handler",
                      "'{cmd} exits with return code = {last_return_code}', cmd being the last "
                      "spawned worker's command line"),
        examples=(Example("[2025-04-02 19:12:55,804] [ERROR] [launch.py:325:sigkill_handler] "
                          "['/usr/bin/python3', '-u', 'train.py', '--local_rank=7', "
                          "'--deepspeed', 'ds_z3.json'] exits with return code = -9",
                          {"device": "host", "weak": True}),),
        near_misses=("[ERROR] [launch.py:325:sigkill_handler] ['python', 'train.py', "
                     "'--local_rank=1'] exits with return code = -95",
                     "[ERROR] [launch.py:325:sigkill_handler] ['python', 'train.py'] exits with "
                     "return code = 1")),
)

ENTRIES += LOSS_SCALE + MEGATRON_NAN + LAUNCHER
