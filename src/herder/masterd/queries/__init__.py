"""Ganeti's query resources, one module each (`registry` names them); `masterd.query`
answers `/2/query` from them."""
