"""The Kubernetes client: which cluster a run gets (backend.py), the adapter (cluster.py) and its
request path (api.py), the user's kubeconfig read in memory (kubeconfig.py) and where its server
may be reached (network.py), each kind's readiness rule (readiness.py), the why-not-ready
diagnosis (diagnosis.py), the access check (access.py), the retry policy (retry.py) and a
response's error text (response.py)."""
