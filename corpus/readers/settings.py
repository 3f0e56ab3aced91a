"""What every part of a length pass shares, and what one part is: Settings (the tokenizer, the BOS policy, the
column and label choices, the separator), a Unit (one file, row groups of a parquet file or a byte range of a
JSON-lines file, planned by the format's reader), and the Batch a reader yields."""
from dataclasses import dataclass, field

import numpy as np

from errors import DataError

BOS_POLICIES = ("auto", "add", "none")
TOKEN_DTYPES = ("uint16", "uint32")
TEXT_COLUMNS = ("text",)
TOKEN_COLUMNS = ("input_ids", "token_ids", "tokens")
LABEL_COLUMNS = ("source", "label")  # taken as labels when no label column is named (as --lengths does)


@dataclass(frozen=True)
class Settings:
    tokenizer: object = None  # a TokenizerSpec, needed for text only
    bos: str = "auto"
    bos_id: int = None
    column: str = None  # the text or token column/field; None: 'text' or one of TOKEN_COLUMNS
    label: str = None  # the label column/field (a dotted path into a JSON record); None: LABEL_COLUMNS or the file
    separator: int = None  # flat token files: the id that ends each document
    token_dtype: str = None  # flat token files without a .npy header: uint16 or uint32
    text_batch: int = 4096  # documents per tokenizer call: memory follows this, not the corpus (a tokenizers
    # call costs about 8% more CPU per token at 1,024, 25% at 256, against the whole corpus in one; 3% at 4,096)

    def check(self):
        if self.bos not in BOS_POLICIES:
            raise DataError(f"BOS policy {self.bos!r}: expected one of {', '.join(BOS_POLICIES)}")
        if self.bos_id is not None and (not isinstance(self.bos_id, (int, np.integer)) or self.bos_id < 0):
            raise DataError(f"BOS id {self.bos_id!r}: expected a token id (an integer >= 0)")
        if self.token_dtype is not None and self.token_dtype not in TOKEN_DTYPES:
            raise DataError(f"token dtype {self.token_dtype!r}: expected one of {', '.join(TOKEN_DTYPES)}")
        if self.separator is not None and (not isinstance(self.separator, (int, np.integer)) or self.separator < 0):
            raise DataError(f"separator id {self.separator!r}: expected a token id (an integer >= 0)")
        if self.text_batch < 1:
            raise DataError(f"text batch {self.text_batch}: must be at least 1")


@dataclass(frozen=True)
class Unit:
    """One piece of work: rows [first_row, ...) of source `source`, from `path` at `where`."""
    source: int  # index into the corpus's sources
    part: int  # its place among the source's units
    fmt: str
    path: str  # the file read (a datasets folder's shard, a Megatron prefix's .idx)
    where: tuple = ()  # parquet: row-group indices; jsonl: (start byte, end byte); otherwise ()
    role: str = "text"  # text | tokens
    column: str = None
    label_column: str = None  # None: every row is labelled label_const
    label_const: str = None
    first_row: int = None  # the unit's first row in its source when known before reading (an error names rows)
    nbytes: int = 0  # for the progress bar's estimate
    extra: dict = field(default_factory=dict, hash=False, compare=False)  # format-specific (a dtype, a BOS source)


@dataclass
class Batch:
    """Consecutive documents of a unit: texts to tokenize, or token counts read without decoding a token."""
    texts: list = None
    lengths: np.ndarray = None  # token counts, no BOS added yet
    first: np.ndarray = None  # tokens only, for BOS auto: the first token of each document (-1 where empty)
    labels: object = None  # labels (str or None) per document, a list or an Arrow string array; None: label_const
    n: int = 0
    trailing: int = 0  # flat token files: 1 when the last document had no separator after it
