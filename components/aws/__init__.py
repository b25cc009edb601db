"""AWS components: network, EKS cluster, GPU node pools with EFA (the instance catalog is components.catalog)."""
