//! Reads of PairDB.

use placement::{PairId, PairRecord};
use redb::{ReadableDatabase, ReadableTable};

use super::MetaStore;
use crate::MetaError;
use crate::tables::{self, PAIRS};

impl MetaStore {
    pub fn pairs(&self) -> Result<Vec<(PairId, PairRecord)>, MetaError> {
        let txn = self.db().begin_read()?;
        let table = txn.open_table(PAIRS)?;
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry?;
            out.push((
                PairId(k.value()),
                tables::decode_versioned("pairs", v.value())?,
            ));
        }
        Ok(out)
    }
}
