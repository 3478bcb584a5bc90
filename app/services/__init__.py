"""Business logic on (db session, tenant, …); raises ``AppError`` subclasses."""
