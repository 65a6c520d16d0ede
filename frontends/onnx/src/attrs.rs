//! A node's attributes, read through typed accessors that record what was read.
//!
//! Takes a node's attribute list. Guarantees: an attribute of the wrong type, or without a
//! value, is an error naming it; [`Attrs::unread`] names any attribute no lowering read, so
//! that an attribute tir does not know is refused, never ignored.

use crate::proto::{self, attribute_proto::AttributeType};
use crate::NodeErrorKind;
use std::cell::RefCell;

/// A node's attributes, each read at most through these accessors, so that an attribute nothing
/// read is refused ([`Attrs::unread`]).
pub(crate) struct Attrs<'a> {
    list: &'a [proto::AttributeProto],
    read: RefCell<Vec<bool>>,
}

impl<'a> Attrs<'a> {
    pub fn new(list: &'a [proto::AttributeProto]) -> Attrs<'a> {
        Attrs {
            list,
            read: RefCell::new(vec![false; list.len()]),
        }
    }

    fn get(
        &self,
        name: &str,
        ty: AttributeType,
    ) -> Result<Option<&'a proto::AttributeProto>, NodeErrorKind> {
        let Some(i) = self.list.iter().position(|a| a.name() == name) else {
            return Ok(None);
        };
        self.read.borrow_mut()[i] = true;
        let a = &self.list[i];
        if a.ref_attr_name.is_some() {
            return Err(NodeErrorKind::Invalid(format!(
                "attribute `{name}` refers to a function attribute outside a function"
            )));
        }
        if a.r#type.is_some() && a.r#type() != ty {
            return Err(NodeErrorKind::Invalid(format!(
                "attribute `{name}` is {}, expected {}",
                a.r#type().as_str_name(),
                ty.as_str_name()
            )));
        }
        Ok(Some(a))
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64, NodeErrorKind> {
        Ok(self.opt_int(name)?.unwrap_or(default))
    }

    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, NodeErrorKind> {
        match self.get(name, AttributeType::Int)? {
            Some(a) => a.i.map(Some).ok_or_else(|| missing(name)),
            None => Ok(None),
        }
    }

    pub fn float(&self, name: &str, default: f32) -> Result<f32, NodeErrorKind> {
        match self.get(name, AttributeType::Float)? {
            Some(a) => a.f.ok_or_else(|| missing(name)),
            None => Ok(default),
        }
    }

    pub fn opt_float(&self, name: &str) -> Result<Option<f32>, NodeErrorKind> {
        match self.get(name, AttributeType::Float)? {
            Some(a) => a.f.map(Some).ok_or_else(|| missing(name)),
            None => Ok(None),
        }
    }

    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, NodeErrorKind> {
        Ok(self.get(name, AttributeType::Ints)?.map(|a| a.ints.clone()))
    }

    pub fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, NodeErrorKind> {
        Ok(self
            .get(name, AttributeType::Floats)?
            .map(|a| a.floats.clone()))
    }

    pub fn string(&self, name: &str, default: &str) -> Result<String, NodeErrorKind> {
        match self.get(name, AttributeType::String)? {
            Some(a) => {
                let bytes = a.s.as_deref().ok_or_else(|| missing(name))?;
                String::from_utf8(bytes.to_vec())
                    .map_err(|_| NodeErrorKind::Invalid(format!("attribute `{name}` is not UTF-8")))
            }
            None => Ok(default.to_string()),
        }
    }

    pub fn graph(&self, name: &str) -> Result<Option<&'a proto::GraphProto>, NodeErrorKind> {
        match self.get(name, AttributeType::Graph)? {
            Some(a) => a.g.as_ref().map(Some).ok_or_else(|| missing(name)),
            None => Ok(None),
        }
    }

    pub fn tensor(&self, name: &str) -> Result<Option<&'a proto::TensorProto>, NodeErrorKind> {
        match self.get(name, AttributeType::Tensor)? {
            Some(a) => a.t.as_ref().map(Some).ok_or_else(|| missing(name)),
            None => Ok(None),
        }
    }

    /// Marks `name` read whatever its value (attributes that do not change inference).
    pub fn ignore(&self, name: &str) {
        if let Some(i) = self.list.iter().position(|a| a.name() == name) {
            self.read.borrow_mut()[i] = true;
        }
    }

    /// The first attribute nothing read.
    pub fn unread(&self) -> Option<&'a str> {
        let read = self.read.borrow();
        self.list
            .iter()
            .zip(read.iter())
            .find(|(_, &r)| !r)
            .map(|(a, _)| a.name())
    }
}

fn missing(name: &str) -> NodeErrorKind {
    NodeErrorKind::Invalid(format!("attribute `{name}` has no value"))
}
