"""Training frameworks above torch: Lightning, Hugging Face Trainer, Megatron-LM, DeepSpeed."""

from __future__ import annotations

from diag.analyze.catalog.spec import Example, Signature, Source, const

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
                      "'Training completed. Do not forget to share your model'; other trainers "
                      "say 'Finished training' or 'Training finished'"),
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
