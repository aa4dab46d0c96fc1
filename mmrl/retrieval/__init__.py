"""Visual retrieval: an embedding model on a Qwen-VL backbone, a faiss index over an image corpus, and retriever
backends by name (``single_step`` here; the VHOP router registers ``router``). See docs/retrieval.md."""
from mmrl.retrieval.embedder import Embedder
from mmrl.retrieval.index import CorpusIndex
from mmrl.retrieval.retriever import RETRIEVERS, Retrieval, Retriever, SingleStepRetriever, build_retriever

__all__ = ["Embedder", "CorpusIndex", "RETRIEVERS", "Retrieval", "Retriever", "SingleStepRetriever", "build_retriever"]
