def register():
    return {}
