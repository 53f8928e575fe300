"""The README's Python example, printing what its comments show.

python docs/examples/readme.py MODEL COLLECTION    # e.g. a splade-tiny-msmarco folder and beir/scifact
"""

import sys

import spladekit

model_id, collection_id = sys.argv[1:3]
model = spladekit.load_model(model_id)
report = spladekit.diagnose(model)
print(
    (round(report.mean_row_norm, 3), round(report.median_pair_score, 2), report.recommended_k, report.recommended_mode)
)
record = spladekit.resolve_rescale(model, k="auto", mode="auto")
print(record)
spladekit.apply_rescale(model, record)
query = model.encode_query("what causes vitamin d deficiency", show_progress=False)
docs = model.encode_document(
    ["Low vitamin D can cause bone pain and fatigue.", "Paris is the capital of France."], show_progress=False
)
print(query.shape, query.nnz, (docs @ query.T).toarray().ravel().round(2))
result = spladekit.evaluate(model, spladekit.load_collection(collection_id, "test"), show_progress=False)
print({measure: round(value, 4) for measure, value in result.metrics.items()})
