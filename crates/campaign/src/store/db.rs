//! The one seam between the store's SQL and its two databases: a
//! connection that is SQLite or PostgreSQL, parameters and rows that read
//! the same from both, and the few spellings that differ between them.
//! The store writes each query once (with `?N` placeholders) and this
//! module runs it on whichever database the store opened.

use postgres::fallible_iterator::FallibleIterator;
use std::cell::RefCell;
use std::collections::HashMap;

/// An error from either database.
#[derive(Debug)]
pub(crate) enum DbError {
    Lite(rusqlite::Error),
    Pg(postgres::Error),
    /// A callback of a streamed query used the store again: PostgreSQL's
    /// connection is busy with the stream until it ends.
    Reentered,
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> DbError {
        DbError::Lite(e)
    }
}

impl From<rusqlite::types::FromSqlError> for DbError {
    fn from(e: rusqlite::types::FromSqlError) -> DbError {
        DbError::Lite(e.into())
    }
}

impl From<postgres::Error> for DbError {
    fn from(e: postgres::Error) -> DbError {
        DbError::Pg(e)
    }
}

/// A query parameter. Nulls carry their type, because PostgreSQL checks a
/// parameter's type against its column.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val {
    Int(Option<i64>),
    Real(f64),
    Text(Option<String>),
}

impl From<i64> for Val {
    fn from(v: i64) -> Val {
        Val::Int(Some(v))
    }
}

impl From<f64> for Val {
    fn from(v: f64) -> Val {
        Val::Real(v)
    }
}

impl From<&str> for Val {
    fn from(v: &str) -> Val {
        Val::Text(Some(v.to_string()))
    }
}

impl From<String> for Val {
    fn from(v: String) -> Val {
        Val::Text(Some(v))
    }
}

impl From<Option<&str>> for Val {
    fn from(v: Option<&str>) -> Val {
        Val::Text(v.map(str::to_string))
    }
}

impl From<Option<String>> for Val {
    fn from(v: Option<String>) -> Val {
        Val::Text(v)
    }
}

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Val::Int(Some(v)) => ValueRef::Integer(*v),
            Val::Real(v) => ValueRef::Real(*v),
            Val::Text(Some(s)) => ValueRef::Text(s.as_bytes()),
            Val::Int(None) | Val::Text(None) => ValueRef::Null,
        }))
    }
}

impl Val {
    fn pg(&self) -> &(dyn postgres::types::ToSql + Sync) {
        match self {
            Val::Int(v) => v,
            Val::Real(v) => v,
            Val::Text(v) => v,
        }
    }
}

/// One result row of either database. Integers are BIGINT on PostgreSQL
/// and INTEGER on SQLite, so both read as `i64`.
pub(crate) enum Row<'a, 'r> {
    Lite(&'a rusqlite::Row<'r>),
    Pg(&'a postgres::Row),
}

impl Row<'_, '_> {
    pub fn int(&self, i: usize) -> Result<i64, DbError> {
        Ok(match self {
            Row::Lite(r) => r.get(i)?,
            Row::Pg(r) => r.try_get(i)?,
        })
    }

    pub fn opt_int(&self, i: usize) -> Result<Option<i64>, DbError> {
        Ok(match self {
            Row::Lite(r) => r.get(i)?,
            Row::Pg(r) => r.try_get(i)?,
        })
    }

    pub fn opt_real(&self, i: usize) -> Result<Option<f64>, DbError> {
        Ok(match self {
            Row::Lite(r) => r.get(i)?,
            Row::Pg(r) => r.try_get(i)?,
        })
    }

    pub fn real(&self, i: usize) -> Result<f64, DbError> {
        Ok(match self {
            Row::Lite(r) => r.get(i)?,
            Row::Pg(r) => r.try_get(i)?,
        })
    }

    /// Text without a copy (documents are read this way).
    pub fn opt_str(&self, i: usize) -> Result<Option<&str>, DbError> {
        Ok(match self {
            Row::Lite(r) => r.get_ref(i)?.as_str_or_null()?,
            Row::Pg(r) => r.try_get(i)?,
        })
    }

    pub fn str(&self, i: usize) -> Result<&str, DbError> {
        Ok(match self {
            Row::Lite(r) => r.get_ref(i)?.as_str()?,
            Row::Pg(r) => r.try_get(i)?,
        })
    }

    pub fn string(&self, i: usize) -> Result<String, DbError> {
        self.str(i).map(str::to_string)
    }

    pub fn opt_string(&self, i: usize) -> Result<Option<String>, DbError> {
        Ok(self.opt_str(i)?.map(str::to_string))
    }
}

/// Which database a connection speaks to, for the few spellings that differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

/// An open connection.
pub(crate) enum Conn {
    Lite(rusqlite::Connection),
    Pg {
        client: Box<RefCell<postgres::Client>>,
        /// Prepared once per connection: a run's metrics are dozens of
        /// inserts of the same statement.
        prepared: RefCell<HashMap<String, postgres::Statement>>,
    },
}

/// `?N` placeholders as PostgreSQL spells them (`$N`). The store's SQL has
/// no `?` inside string literals, so a plain scan is enough.
fn pg_sql(sql: &str) -> String {
    sql.replace('?', "$")
}

impl Conn {
    pub fn pg(client: postgres::Client) -> Conn {
        Conn::Pg {
            client: Box::new(RefCell::new(client)),
            prepared: RefCell::new(HashMap::new()),
        }
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Conn::Lite(_) => Dialect::Sqlite,
            Conn::Pg { .. } => Dialect::Postgres,
        }
    }

    fn statement(
        client: &mut postgres::Client,
        prepared: &RefCell<HashMap<String, postgres::Statement>>,
        sql: &str,
    ) -> Result<postgres::Statement, DbError> {
        let mut cache = prepared.try_borrow_mut().map_err(|_| DbError::Reentered)?;
        if let Some(s) = cache.get(sql) {
            return Ok(s.clone());
        }
        let s = client.prepare(&pg_sql(sql))?;
        cache.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    /// Runs one or more statements without parameters.
    pub fn batch(&self, sql: &str) -> Result<(), DbError> {
        match self {
            Conn::Lite(c) => c.execute_batch(sql)?,
            Conn::Pg { client, .. } => client
                .try_borrow_mut()
                .map_err(|_| DbError::Reentered)?
                .batch_execute(sql)?,
        }
        Ok(())
    }

    /// Runs one statement; the number of rows it changed.
    pub fn execute(&self, sql: &str, params: &[Val]) -> Result<u64, DbError> {
        match self {
            Conn::Lite(c) => {
                let mut st = c.prepare_cached(sql)?;
                Ok(st.execute(rusqlite::params_from_iter(params))? as u64)
            }
            Conn::Pg { client, prepared } => {
                let mut client = client.try_borrow_mut().map_err(|_| DbError::Reentered)?;
                let st = Self::statement(&mut client, prepared, sql)?;
                let args: Vec<_> = params.iter().map(Val::pg).collect();
                Ok(client.execute(&st, &args)?)
            }
        }
    }

    /// Streams the rows of a query to `each`, one at a time, in the
    /// database's order. `each` must not use this connection.
    pub fn each<E: From<DbError>>(
        &self,
        sql: &str,
        params: &[Val],
        mut each: impl FnMut(&Row) -> Result<(), E>,
    ) -> Result<(), E> {
        match self {
            Conn::Lite(c) => {
                let mut st = c.prepare_cached(sql).map_err(DbError::from)?;
                let mut rows = st
                    .query(rusqlite::params_from_iter(params))
                    .map_err(DbError::from)?;
                while let Some(r) = rows.next().map_err(DbError::from)? {
                    each(&Row::Lite(r))?;
                }
            }
            Conn::Pg { client, prepared } => {
                let mut client = client.try_borrow_mut().map_err(|_| DbError::Reentered)?;
                let st = Self::statement(&mut client, prepared, sql)?;
                // query_raw reads rows off the socket as they are asked
                // for, so a long result never sits in memory whole.
                let mut rows = client
                    .query_raw(&st, params.iter().map(Val::pg))
                    .map_err(DbError::from)?;
                while let Some(r) = rows.next().map_err(DbError::from)? {
                    each(&Row::Pg(&r))?;
                }
            }
        }
        Ok(())
    }

    /// The first row of a query, read by `f`, if there is one.
    pub fn first<T>(
        &self,
        sql: &str,
        params: &[Val],
        f: impl Fn(&Row) -> Result<T, DbError>,
    ) -> Result<Option<T>, DbError> {
        let mut out = None;
        self.each(sql, params, |r| {
            if out.is_none() {
                out = Some(f(r)?);
            }
            Ok::<_, DbError>(())
        })?;
        Ok(out)
    }
}
