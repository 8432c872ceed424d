"""``nodefence simulate --backend real``: the simulator's scenario and control surface served by
a real Kubernetes control plane (kube-apiserver, kube-controller-manager, kube-scheduler and
embedded etcd from ``make controlplane``, with one kwok process per node as its kubelet)."""
