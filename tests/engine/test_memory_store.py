from forklab.engine.store import MemoryStore, Store
from tests.engine.store_contract import StoreContract


class TestMemoryStore(StoreContract):
    def make_store(self) -> Store:
        return MemoryStore()
